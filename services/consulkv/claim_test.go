package consulkv_test

import (
	"testing"

	"github.com/policyflow/policyflow/services/consulkv"
)

func TestClaimJSON(t *testing.T) {
	c := consulkv.Claim{UpdateID: "u1", Generation: 3, At: "2018-02-12T10:20:30Z"}
	if got := string(c.JSON()); got != `{"update_id":"u1","generation":3,"exit_code":null,"stderr":"","at":"2018-02-12T10:20:30Z"}` {
		t.Fatalf("pending claim %s", got)
	}
	code := 2
	c.ExitCode, c.Stderr = &code, "boom"
	back, err := consulkv.ParseClaim(c.JSON())
	if err != nil || back.ExitCode == nil || *back.ExitCode != 2 || back.Stderr != "boom" || back.Generation != 3 {
		t.Fatalf("ParseClaim: %+v %v", back, err)
	}
	if _, err := consulkv.ParseClaim([]byte("not json")); err == nil {
		t.Fatal("a value that is not JSON parsed as a claim")
	}
}
