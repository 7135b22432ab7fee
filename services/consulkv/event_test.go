package consulkv_test

import (
	"testing"

	"github.com/policyflow/policyflow/services/consulkv"
)

func TestEventJSON(t *testing.T) {
	e := consulkv.Event{Action: consulkv.ActionGathered, Timestamp: "2018-02-12T10:20:30.777Z", UpdateID: "0e79edc0", PoliciesCount: 30, Generation: 4}
	want := `{"action":"gathered","timestamp":"2018-02-12T10:20:30.777Z","update_id":"0e79edc0","policies_count":30,"generation":4}`
	if got := string(e.JSON()); got != want {
		t.Fatalf("event JSON %s, want %s", got, want)
	}
	back, err := consulkv.ParseEvent([]byte(want))
	if err != nil || back != e {
		t.Fatalf("ParseEvent: %+v %v", back, err)
	}
	if _, err := consulkv.ParseEvent([]byte(`{"update_id":"x"}`)); err == nil {
		t.Fatal("event without action parsed")
	}
}
