package backend

import (
	"context"
	"regexp"
	"strings"
	"testing"
)

func TestPrefixIsUniqueAndLegal(t *testing.T) {
	b := &Backend{}
	legal := regexp.MustCompile(`^t-[a-z0-9-]{1,40}-[0-9a-f]{6}\.$`)
	seen := map[string]bool{}
	for range 50 {
		p := b.Prefix(t)
		if !legal.MatchString(p) {
			t.Fatalf("Prefix = %q, want it to match %s", p, legal)
		}
		if seen[p] {
			t.Fatalf("Prefix returned %q twice", p)
		}
		seen[p] = true
	}
	if p := b.Prefix(t); !strings.HasPrefix(p, "t-testprefixisuniqueandlegal-") {
		t.Fatalf("Prefix = %q, want it to start with the sanitized test name", p)
	}
}

func TestSanitize(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"TestSmoke", "testsmoke"},
		{"TestMatcher/filter_by_onapName#01", "testmatcher-filter-by-onapname-01"},
		{"Test  weird//name__", "test-weird-name"},
		{"/", "test"},
		{"", "test"},
		{strings.Repeat("a", 100), strings.Repeat("a", 40)},
		{"TestX/" + strings.Repeat("b", 60), "testx-" + strings.Repeat("b", 34)},
	} {
		if got := sanitize(tc.in, 40); got != tc.want {
			t.Errorf("sanitize(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestKafkaFamily(t *testing.T) {
	for _, tc := range []struct{ image, want string }{
		{"policyflow/devbroker:dev", FamilyDevbroker},
		{"registry.example.com:5000/policyflow/devbroker:1.2", FamilyDevbroker},
		{"apache/kafka:4.1.0", FamilyApacheKafka},
		{"apache/kafka-native:4.1.0", FamilyApacheKafka},
		{"mirror.example.com/apache/kafka@sha256:0123", FamilyApacheKafka},
		{"apache/kafka", FamilyApacheKafka},
	} {
		got, err := KafkaFamily(tc.image)
		if err != nil || got != tc.want {
			t.Errorf("KafkaFamily(%q) = %q, %v; want %q", tc.image, got, err, tc.want)
		}
	}
	for _, image := range []string{"bitnami/kafka-exporter:1", "redpanda/redpanda:v24", "hashicorp/consul:1.20"} {
		if got, err := KafkaFamily(image); err == nil {
			t.Errorf("KafkaFamily(%q) = %q, want an error naming the known families", image, got)
		}
	}
}

func TestLocalBuildTarget(t *testing.T) {
	for _, tc := range []struct {
		image, target, tag string
		ok                 bool
	}{
		{"policyflow/devbroker:dev", "devbroker", "dev", true},
		{"policyflow/consul:dev", "consul", "dev", true},
		{"policyflow/consul", "consul", "latest", true},
		{"policyflow/matcher:v1.2.3", "matcher", "v1.2.3", true},
		{"hashicorp/consul:1.20", "", "", false},
		{"apache/kafka:4.1.0", "", "", false},
		{"registry.example.com:5000/policyflow/consul:dev", "", "", false},
		{"policyflow/consul@sha256:0123", "", "", false},
		{"consul:dev", "", "", false},
	} {
		target, tag, ok := LocalBuildTarget(tc.image)
		if target != tc.target || tag != tc.tag || ok != tc.ok {
			t.Errorf("LocalBuildTarget(%q) = %q, %q, %v; want %q, %q, %v", tc.image, target, tag, ok, tc.target, tc.tag, tc.ok)
		}
	}
}

func TestHasLeader(t *testing.T) {
	for body, want := range map[string]bool{
		`"127.0.0.1:8300"`:    true,
		"\"10.0.0.7:8300\"\n": true,
		`""`:                  false,
		"":                    false,
		"No cluster leader":   false,
	} {
		if got := hasLeader(strings.NewReader(body)); got != want {
			t.Errorf("hasLeader(%q) = %v, want %v", body, got, want)
		}
	}
}

func TestPortTaken(t *testing.T) {
	for msg, want := range map[string]bool{
		"Error response from daemon: driver failed programming external connectivity on endpoint x: Bind for 127.0.0.1:40000 failed: port is already allocated": true,
		"listen tcp4 127.0.0.1:40000: bind: address already in use": true,
		"wait until ready: container exited with code 1":            false,
	} {
		if got := portTaken(errString(msg)); got != want {
			t.Errorf("portTaken(%q) = %v, want %v", msg, got, want)
		}
	}
}

type errString string

func (e errString) Error() string { return string(e) }

// PF_BACKEND=external says which variable is missing, and carries the
// SASL and TLS settings and the Consul token into every configuration.
func TestExternalNeedsItsEnvironmentAndCarriesIt(t *testing.T) {
	for _, v := range []string{"PF_BROKERS", "PF_CONSUL_ADDR", "CONSUL_HTTP_ADDR", "PF_SASL_MECHANISM", "PF_SASL_USER", "PF_SASL_PASSWORD", "PF_TLS", "PF_TLS_CA", "PF_CONSUL_TOKEN", "CONSUL_HTTP_TOKEN"} {
		t.Setenv(v, "")
	}
	_, err := startExternal(context.Background())
	if err == nil || !strings.Contains(err.Error(), "PF_BROKERS") || !strings.Contains(err.Error(), "PF_CONSUL_ADDR") {
		t.Fatalf("without PF_BROKERS and PF_CONSUL_ADDR: %v, want an error naming both", err)
	}
	t.Setenv("PF_BROKERS", "k1:9092,k2:9092")
	t.Setenv("PF_CONSUL_ADDR", "consul:8500")
	t.Setenv("PF_SASL_MECHANISM", "SCRAM-SHA-512")
	if _, err := startExternal(context.Background()); err == nil || !strings.Contains(err.Error(), "PF_SASL_USER") {
		t.Fatalf("SASL without a user: %v, want an error naming PF_SASL_USER", err)
	}
	t.Setenv("PF_SASL_USER", "qual")
	t.Setenv("PF_SASL_PASSWORD", "secret")
	t.Setenv("PF_TLS", "true")
	t.Setenv("PF_CONSUL_TOKEN", "tok")
	b, err := startExternal(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	k := b.Kafka("t-x.")
	if b.Kind != KindExternal || len(k.Brokers) != 2 || k.SASLUser != "qual" || k.SASLPassword != "secret" || !k.TLS || k.Prefix != "t-x." {
		t.Fatalf("external Kafka settings %+v, want both brokers, SASL qual/secret, TLS and the prefix", k)
	}
	if c := b.Consul(); c.Addr != "consul:8500" || c.Token != "tok" {
		t.Fatalf("external Consul settings %+v, want consul:8500 with token tok", c)
	}
	if Stem("t-x-1a2b3c.") != "t-x-1a2b3c" {
		t.Fatalf("Stem keeps the dot")
	}
}
