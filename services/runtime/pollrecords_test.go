package runtime

import "testing"

func TestStagePollRecordsCapsTheEnvironments(t *testing.T) {
	for _, tc := range []struct{ stage, env, want int }{
		{0, 5000, 5000},    // the environment's
		{500, 5000, 500},   // a stage's lower cap
		{9000, 5000, 5000}, // never above the environment's
		{500, 0, 500},
	} {
		r := &runner{stage: Stage{PollRecords: tc.stage}, env: Env{PollRecords: tc.env}}
		if got := r.pollRecords(); got != tc.want {
			t.Errorf("stage %d, env %d: %d records per poll, want %d", tc.stage, tc.env, got, tc.want)
		}
	}
}
