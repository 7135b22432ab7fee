package address

import (
	"errors"
	"testing"
)

func TestApplies(t *testing.T) {
	const p1, p2 = "5d1e3a5e-0000-4000-8000-000000000001", "5d1e3a5e-0000-4000-8000-000000000002"
	const r1, r2 = "0b7c2d64-aaaa-4bbb-8ccc-000000000001", "0b7c2d64-aaaa-4bbb-8ccc-000000000002"
	me := Receiver{ParticipantID: p1, ReplicaID: r1}
	for _, tc := range []struct {
		name  string
		class string
		m     Message
		want  bool
	}{
		{"list without the receiver", ClassParticipant, Message{ParticipantIDList: []string{p2}}, false},
		{"list without the receiver beats a matching id", ClassParticipant, Message{ParticipantID: p1, ReplicaID: r1, ParticipantIDList: []string{p2}}, false},
		{"list with the receiver, no participantId", ClassParticipant, Message{ParticipantIDList: []string{p2, p1}}, true},
		{"list compared by value", ClassParticipant, Message{ParticipantIDList: []string{"5D1E3A5E-0000-4000-8000-000000000001"}}, true},
		{"an ack message has no list: it is not looked at", ClassParticipantAck, Message{ParticipantIDList: []string{p2}}, true},
		{"empty list is no list", ClassParticipant, Message{ParticipantIDList: []string{}}, true},
		{"no participantId: broadcast", ClassParticipant, Message{}, true},
		{"no participantId, another replicaId: still broadcast", ClassParticipant, Message{ReplicaID: r2}, true},
		{"my participant, no replica: any replica", ClassParticipant, Message{ParticipantID: p1}, true},
		{"my participant in upper case, no replica", ClassParticipantAck, Message{ParticipantID: "5D1E3A5E-0000-4000-8000-000000000001"}, true},
		{"my participant, my replica", ClassParticipant, Message{ParticipantID: p1, ReplicaID: r1}, true},
		{"my participant, my replica in upper case", ClassParticipant, Message{ParticipantID: p1, ReplicaID: "0B7C2D64-AAAA-4BBB-8CCC-000000000001"}, true},
		{"my participant, another replica", ClassParticipant, Message{ParticipantID: p1, ReplicaID: r2}, false},
		{"another participant, no replica", ClassParticipant, Message{ParticipantID: p2}, false},
		{"another participant, another replica", ClassParticipantAck, Message{ParticipantID: p2, ReplicaID: r2}, false},
		{"another participant naming my replica id: the replica decides", ClassParticipant, Message{ParticipantID: p2, ReplicaID: r1}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Applies(tc.class, tc.m, me)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("Applies(%s, %+v, %+v) = %v, want %v", tc.class, tc.m, me, got, tc.want)
			}
		})
	}
}

func TestAppliesNeedsReceiverIDs(t *testing.T) {
	for _, r := range []Receiver{{ReplicaID: "r"}, {ParticipantID: "p"}, {ParticipantID: " ", ReplicaID: "r"}} {
		if _, err := Applies(ClassParticipant, Message{}, r); !errors.Is(err, ErrNoReceiverID) {
			t.Errorf("receiver %+v: error %v, want ErrNoReceiverID", r, err)
		}
	}
}
