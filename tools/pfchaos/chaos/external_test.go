package chaos

import (
	"context"
	"slices"
	"strings"
	"testing"
)

// Against an external cluster only the faults that stop neither the broker
// nor Consul and need no in-process broker run; asking for another is
// refused before anything starts.
func TestExternalRunsOnlyFaultsThatLeaveTheClusterAlone(t *testing.T) {
	ext := ExternalFaults()
	for _, f := range append([]string{FaultBrokerRestart, FaultConsulDown, FaultConsulLeaderLoss, FaultNetworkDisconnected}, ClusterFaults()...) {
		if slices.Contains(ext, f) {
			t.Errorf("ExternalFaults holds %s", f)
		}
	}
	for _, f := range []string{Kill("executor"), Replace("consul-writer"), FaultRebalanceStorm, FaultScriptFails, FaultConsulEdit} {
		if !slices.Contains(ext, f) {
			t.Errorf("ExternalFaults lacks %s", f)
		}
	}
	o := Defaults()
	o.External = &External{}
	o.Faults = []string{Kill("executor"), FaultLeaderMove}
	if _, err := Run(context.Background(), o); err == nil || !strings.Contains(err.Error(), FaultLeaderMove) {
		t.Fatalf("Run with %s on an external cluster: %v, want a refusal naming it", FaultLeaderMove, err)
	}
}

func TestExternalFromEnvSaysWhatIsMissing(t *testing.T) {
	for _, v := range []string{"PF_BROKERS", "PF_CONSUL_ADDR", "CONSUL_HTTP_ADDR", "PF_SASL_MECHANISM"} {
		t.Setenv(v, "")
	}
	if _, err := ExternalFromEnv(); err == nil || !strings.Contains(err.Error(), "PF_BROKERS") {
		t.Errorf("without PF_BROKERS: %v", err)
	}
	t.Setenv("PF_BROKERS", "k:9092")
	if _, err := ExternalFromEnv(); err == nil || !strings.Contains(err.Error(), "PF_CONSUL_ADDR") {
		t.Errorf("without PF_CONSUL_ADDR: %v", err)
	}
	t.Setenv("PF_CONSUL_ADDR", "c:8500")
	e, err := ExternalFromEnv()
	if err != nil || e.Kafka.Brokers[0] != "k:9092" || e.Consul.Addr != "c:8500" {
		t.Errorf("ExternalFromEnv: %+v, %v", e, err)
	}
}
