package executor

import (
	"context"
	"testing"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
)

// TestStoreRecognisesItsOwnWrites: a record read back that is the one the
// executor produced keeps what it wrote, without decoding it; one that is
// not, even of the same length, update and generation, is decoded and
// kept as committed.
func TestStoreRecognisesItsOwnWrites(t *testing.T) {
	codec, err := events.NewCodec()
	if err != nil {
		t.Fatal(err)
	}
	s := newCollectionStore(zerolog.Nop(), codec)
	s.own(1, []int32{0})
	ctx := context.Background()
	write := func(body string) (*events.ComponentPolicies, []byte) {
		p := pol("A", "1")
		p.Body = body
		cp := &events.ComponentPolicies{ComponentID: "c1", DeploymentID: "dep-1", ServiceComponentName: "c1", UpdateID: "u1",
			Generation: 1, Policies: []events.Policy{p}, UpdatedPolicies: []events.Policy{}, RemovedPolicies: []events.Policy{},
			Notify: events.NotifyTarget{Kind: events.NotifyWebhook, WebhookURL: "http://hook/c1"}}
		raw, err := codec.Encode(cp)
		if err != nil {
			t.Fatal(err)
		}
		return cp, raw
	}
	read := func(raw []byte) {
		if err := s.apply(ctx, &kgo.Record{Key: []byte("c1"), Value: raw}); err != nil {
			t.Fatal(err)
		}
	}

	ours, raw := write(`{"v":"ours"}`)
	s.wrote([]written{{cp: ours, raw: raw}}, 0)
	wrote := s.overlay["c1"].k
	if got, _ := s.lookup("c1"); got == nil || got.Policies[0].Body != `{"v":"ours"}` || got.Generation != 1 {
		t.Fatalf("before it is read back, c1's collection is %+v, want ours", got)
	}
	read(raw)
	if len(s.overlay) != 0 || s.committed["c1"] != wrote {
		t.Errorf("our own write read back: overlay %v, committed %p; want it kept as written (%p), not decoded", s.overlay, s.committed["c1"], wrote)
	}

	// Another member's record of the same update and generation, as long
	// as ours: it is what component.policies holds.
	ours, raw = write(`{"v":"ours"}`)
	s.wrote([]written{{cp: ours, raw: raw}}, 0)
	_, theirs := write(`{"v":"them"}`)
	if len(theirs) != len(raw) {
		t.Fatal("the test's records differ in length; it would prove less")
	}
	read(theirs)
	if got, _ := s.lookup("c1"); len(s.overlay) != 0 || got == nil || got.Policies[0].Body != `{"v":"them"}` {
		t.Errorf("another member's record read back: overlay %v, c1's collection %+v; want the record's", s.overlay, got)
	}
}
