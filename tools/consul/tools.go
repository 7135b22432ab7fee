//go:build tools

// Package consul pins the Consul agent that the embedded stack and the
// integration tests run. Consul's own go.mod carries replace directives, so
// `go install` refuses it; this wrapper module requires it instead and
// `make consul` builds github.com/hashicorp/consul from here.
package consul

import _ "github.com/hashicorp/consul"
