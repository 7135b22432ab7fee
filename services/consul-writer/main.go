// Command consul-writer writes each component's policy collection into its
// Consul KV folder and reports every write on component.applied.
package main

import (
	"github.com/policyflow/policyflow/services/consul-writer/consulwriter"
	"github.com/policyflow/policyflow/services/runtime"
)

func main() { runtime.Main(consulwriter.Stage()) }
