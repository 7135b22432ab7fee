package main

import (
	"context"
	"flag"
	"io"
	"slices"
	"strings"
	"testing"
)

func TestMembersFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []int
	}{
		{nil, []int{1, 2}},
		{[]string{"--members", "1"}, []int{1}},
		{[]string{"--members", "2, 1,3"}, []int{2, 1, 3}},
	} {
		var o options
		fs := flag.NewFlagSet("pfbench", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		o.register(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatalf("pfbench %v: %v", tc.args, err)
		}
		if err := o.validate(); err != nil {
			t.Fatalf("pfbench %v: %v", tc.args, err)
		}
		if !slices.Equal(o.members, tc.want) {
			t.Fatalf("pfbench %v: members %v, want %v", tc.args, o.members, tc.want)
		}
	}
	for _, tc := range []struct{ args, want string }{
		{"--members 0", "--members [0]"},
		{"--members 1,x", `"x" is not a whole number`},
		{"--members 1,7", "1 to --partitions (6)"},
		{"--partitions 2 --members 1,2,3", "1 to --partitions (2)"},
	} {
		var out strings.Builder
		err := run(context.Background(), strings.Fields(tc.args), &out, &out)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("pfbench %s: error %v, want one saying %q", tc.args, err, tc.want)
		}
	}
}
