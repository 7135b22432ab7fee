package stagetest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/services/testkit"
)

// Membership is what the members of one Members run did: the input
// records each handled (aborted transactions' records count again when
// handled again) and the transactions each aborted, in the order the
// members started.
type Membership struct {
	Handled []int
	Aborted []int
}

func (m Membership) String() string {
	parts := make([]string, len(m.Handled))
	for i := range m.Handled {
		parts[i] = fmt.Sprintf("member %d handled %d records, aborted %d transactions", i+1, m.Handled[i], m.Aborted[i])
	}
	return strings.Join(parts, "; ")
}

// Members runs a stage as n members (1, 2 or 3) through a backlog of
// input that is complete before the first member starts, and changes the
// group while the output read by out grows towards want records (what one
// member writes):
//
//   - 1: one member from start to end;
//   - 2: a second member joins at a sixth of the output; at half, a third
//     joins as the first leaves (two members throughout, one of each);
//   - 3: a second member joins at a sixth, a third at a third, and the
//     first leaves at half.
//
// Each member is a new stage (newStage) with an environment of its own
// (newEnv), so that its metrics are its own. Once the group has
// committed every input record, Members reads the output to its end,
// stops every member and returns the output and what each member did.
// With more than one member, the test fails unless two of them at least
// handled records: the backlog must outlast a member's joining. (A member
// may join as the last records are handled and find none left: a
// partition's records are not spread evenly over the run.)
func (c *Cluster) Members(t testing.TB, n int, newStage func() runtime.Stage, newEnv func() runtime.Env, out *Reader, want int) ([]*kgo.Record, Membership) {
	t.Helper()
	if n < 1 || n > 3 {
		t.Fatalf("Members runs 1, 2 or 3 members, not %d", n)
	}
	const wait = 90 * time.Second
	type member struct {
		stage runtime.Stage
		env   runtime.Env
		stop  func()
	}
	var ms []*member
	join := func() *member {
		m := &member{stage: newStage(), env: newEnv()}
		m.stop = Run(t, m.stage, m.env)
		ms = append(ms, m)
		return m
	}
	first := join()
	if n > 1 {
		out.Until(want/6, wait)
		join()
		if n == 3 {
			out.Until(want/3, wait)
			join()
		}
		out.Until(want/2, wait)
		if n == 2 {
			join()
		}
		first.stop()
	}
	c.WaitCommitted(t, first.stage.GroupIn(c.Kafka), wait, first.stage.Inputs...)
	// The outputs commit with the offsets: read until a poll brings
	// nothing more.
	for {
		if len(out.Poll(Linger)) == 0 {
			break
		}
	}
	var wg sync.WaitGroup
	for _, m := range ms {
		wg.Add(1)
		go func() { defer wg.Done(); m.stop() }()
	}
	wg.Wait()
	var got Membership
	for _, m := range ms {
		handled := 0
		for _, in := range m.stage.Inputs {
			handled += int(testutil.ToFloat64(m.env.Metrics.RecordsIn.WithLabelValues(m.stage.Name, in)))
		}
		got.Handled = append(got.Handled, handled)
		got.Aborted = append(got.Aborted, int(testutil.ToFloat64(m.env.Metrics.Txns.WithLabelValues(m.stage.Name, "aborted"))))
	}
	working := 0
	for _, h := range got.Handled {
		if h > 0 {
			working++
		}
	}
	if n > 1 && working < 2 {
		t.Errorf("one member of %s handled every record: the backlog was done before another joined, and the run tested nothing (%v)", first.stage.Name, got)
	}
	return out.Records(), got
}

// WaitCommitted waits until a consumer group has committed every record
// of the topics (base names), failing the test after wait.
func (c *Cluster) WaitCommitted(t testing.TB, group string, wait time.Duration, topics ...string) {
	t.Helper()
	full := make([]string, len(topics))
	for i, b := range topics {
		full[i] = c.Kafka.Topic(b)
	}
	ctx := context.Background()
	err := testkit.Wait(wait, func() error {
		ends, err := c.Admin.ListEndOffsets(ctx, full...)
		if err != nil {
			return err
		}
		offs, err := c.Admin.FetchOffsets(ctx, group)
		if err != nil {
			return err
		}
		var behind []string
		ends.Each(func(o kadm.ListedOffset) {
			if o.Offset == 0 {
				return
			}
			if got, ok := offs.Lookup(o.Topic, o.Partition); !ok || got.At < o.Offset {
				behind = append(behind, fmt.Sprintf("%s[%d] at %d of %d", o.Topic, o.Partition, got.At, o.Offset))
			}
		})
		if len(behind) > 0 {
			return fmt.Errorf("group %s has not committed %s", group, strings.Join(behind, ", "))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// CompareLines says how got differs from want, key by key (a key's lines
// describe its records in the order written): the lines beyond want's,
// those missing, and the keys whose lines agree as a multiset but not in
// order; "" when they are the same.
func CompareLines(got, want map[string][]string) string {
	keys := map[string]bool{}
	for k := range got {
		keys[k] = true
	}
	for k := range want {
		keys[k] = true
	}
	var extra, missing, order []string
	for k := range keys {
		e, m := diffSorted(slices.Sorted(slices.Values(got[k])), slices.Sorted(slices.Values(want[k])))
		extra, missing = append(extra, e...), append(missing, m...)
		if len(e) == 0 && len(m) == 0 && !slices.Equal(got[k], want[k]) {
			order = append(order, k)
		}
	}
	if len(extra) == 0 && len(missing) == 0 && len(order) == 0 {
		return ""
	}
	slices.Sort(extra)
	slices.Sort(missing)
	slices.Sort(order)
	for _, l := range [][]string{extra, missing} {
		for i, s := range l[:min(5, len(l))] {
			if len(s) > 240 {
				l[i] = s[:240] + "..."
			}
		}
	}
	return fmt.Sprintf(" %d beyond what was wanted (first 5): %q\n %d missing (first 5): %q\n %d keys in another order (first 5): %q",
		len(extra), extra[:min(5, len(extra))], len(missing), missing[:min(5, len(missing))], len(order), order[:min(5, len(order))])
}

// diffSorted returns the lines of got beyond want and those of want that
// got lacks (multisets; both sorted).
func diffSorted(got, want []string) (extra, missing []string) {
	i, j := 0, 0
	for i < len(got) || j < len(want) {
		switch {
		case j == len(want) || (i < len(got) && got[i] < want[j]):
			extra = append(extra, got[i])
			i++
		case i == len(got) || got[i] > want[j]:
			missing = append(missing, want[j])
			j++
		default:
			i++
			j++
		}
	}
	return extra, missing
}
