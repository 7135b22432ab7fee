package main

import (
	"strings"
	"testing"
)

func TestExplainAppliesTo(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want bool
	}{
		{`{"message_class":"ParticipantMessage","message":{"participantId":"P1","replicaId":""},"receiver":{"participantId":"p1","replicaId":"r1"}}`, true},
		{`{"message_class":"ParticipantMessage","message":{"participantId":"p1","replicaId":"r2"},"receiver":{"participantId":"p1","replicaId":"r1"}}`, false},
		{`{"message_class":"ParticipantMessage","message":{"participantIdList":["p2"]},"receiver":{"participantId":"p1","replicaId":"r1"}}`, false},
		{`{"message_class":"ParticipantAckMessage","message":{"participantId":"p1","replicaId":"R1"},"receiver":{"participantId":"p1","replicaId":"r1"}}`, true},
	} {
		r := policyctlIn(t, tc.in, "explain", "applies-to")
		if r.code != 0 {
			t.Errorf("%s: exit %d, stderr %q", tc.in, r.code, r.errOut)
			continue
		}
		if got := stdoutJSON(t, r); len(got) != 1 || got["applies"] != tc.want {
			t.Errorf("%s: %v, want applies %v", tc.in, got, tc.want)
		}
	}
}

func TestExplainAppliesToRefuses(t *testing.T) {
	for _, tc := range []struct{ in, reason string }{
		{`{"message_class":"ParticipantMessage","message":{"participantId":"p1"},"receiver":{"replicaId":"r1"}}`, "receiver.participantId is empty"},
		{`{"message_class":"ParticipantMessage","message":{"participantId":"p1"},"receiver":{"participantId":"p1"}}`, "receiver.replicaId is empty"},
		{`{"message_class":"ParticipantMessage","message":{"participantId":"p1"}}`, "no receiver"},
		{`{"message_class":"Other","message":{},"receiver":{"participantId":"p1","replicaId":"r1"}}`, "message_class"},
		{`{"message_class":"ParticipantAckMessage","message":{"participantIdList":["p1"]},"receiver":{"participantId":"p1","replicaId":"r1"}}`, "has no participantIdList"},
		{`{"message_class":"ParticipantMessage","message":{"participant":"p1"},"receiver":{"participantId":"p1","replicaId":"r1"}}`, "not the input"},
		{``, "stdin is empty"},
	} {
		r := policyctlIn(t, tc.in, "explain", "applies-to")
		if r.code == 0 || r.out != "" || !strings.Contains(r.errOut, tc.reason) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want a failure saying %q", tc.in, r.code, r.out, r.errOut, tc.reason)
		}
	}
}
