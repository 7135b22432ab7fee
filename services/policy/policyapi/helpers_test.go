package policyapi

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/policyflow/policyflow/services/notifytarget"
)

// TestMain makes the reconfigure script components register with and
// runs the tests.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "policyapi-scripts")
	if err != nil {
		panic(err)
	}
	testScriptDir, testScript = dir, filepath.Join(dir, "reconfigure.sh")
	if err := os.WriteFile(testScript, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		panic(err)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// testScriptDir is the script directory the tests' rules allow, and
// testScript an executable script in it.
var testScriptDir, testScript string

// testRules allow scripts from testScriptDir and webhooks to 127.0.0.1
// and app.example.
func testRules(t testing.TB) ComponentRules {
	t.Helper()
	r, err := Registration{Targets: notifytarget.Config{ScriptDirs: []string{testScriptDir}, WebhookAllow: []string{"127.0.0.1", "app.example"}}}.Rules()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func componentBody() map[string]any {
	return map[string]any{
		"deployment_id":          "dep-1",
		"service_component_name": "scn-comp",
		"tenant":                 "t1",
		"policy_ids":             []string{"DCAE.Config_VM_MEMORY"},
		"policy_filters": []map[string]any{{
			"filter_id": "f1", "policyName": "DCAE.Config_.*", "onapName": "DCAE",
			"configAttributes": map[string]any{"key1": "value1"},
		}},
		"notify": map[string]any{"kind": "script", "script_path": testScript, "timeout_ms": 5000},
		"config": map[string]any{"threshold": 7},
	}
}
