package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/policyflow/policyflow/services/acm/address"
)

const explainAppliesToSummary = "read {\"message_class\", \"message\", \"receiver\"} on stdin and print whether the message is for that participant replica (ACM's addressing rule); needs no server"

const appliesToExample = `{"message_class": "ParticipantMessage", "message": {"participantId": "p1", "replicaId": "", "participantIdList": ["p1"]}, "receiver": {"participantId": "p1", "replicaId": "r1"}}`

func init() {
	register(command{name: "explain applies-to", summary: explainAppliesToSummary, run: runExplainAppliesTo})
}

// appliesToInput is what explain applies-to reads.
type appliesToInput struct {
	MessageClass string            `json:"message_class"`
	Message      *address.Message  `json:"message"`
	Receiver     *address.Receiver `json:"receiver"`
}

func runExplainAppliesTo(ctx context.Context, args []string) error {
	fs := newFlagSet(ctx, "explain applies-to", explainAppliesToSummary+
		"\n\nThe rule, in order: a non-empty participantIdList (ParticipantMessage only) that lacks the"+
		"\nreceiver's participantId: false; a message with no participantId, or with the receiver's"+
		"\nparticipantId and no replicaId: true; otherwise replicaId equals the receiver's replicaId."+
		"\nIds compare by value (case does not matter).", "< input.json")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageErrorf("explain applies-to reads its input on stdin and takes no arguments, got %q", fs.Args())
	}
	data, err := readStdin(ctx, appliesToExample)
	if err != nil {
		return err
	}
	var in appliesToInput
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		return fmt.Errorf("stdin is not the input explain applies-to expects: %s; give %s", jsonErrorAt(data, err), appliesToExample)
	}
	switch in.MessageClass {
	case address.ClassParticipant, address.ClassParticipantAck:
	default:
		return fmt.Errorf("message_class %q: want %q or %q", in.MessageClass, address.ClassParticipant, address.ClassParticipantAck)
	}
	if in.Message == nil {
		return fmt.Errorf("stdin has no message; give %s", appliesToExample)
	}
	if in.Receiver == nil {
		return fmt.Errorf("stdin has no receiver; give %s", appliesToExample)
	}
	if in.MessageClass == address.ClassParticipantAck && len(in.Message.ParticipantIDList) > 0 {
		return fmt.Errorf("message.participantIdList: a %s has no participantIdList; remove it or use %s", address.ClassParticipantAck, address.ClassParticipant)
	}
	ok, err := address.Applies(in.MessageClass, *in.Message, *in.Receiver)
	if err != nil {
		return err
	}
	return printJSON(ctx, map[string]bool{"applies": ok})
}
