// Command agent-notifier tells components that their policies changed: it
// runs each component's reconfigure script or calls its webhook, at most
// once per update.
package main

import (
	"github.com/policyflow/policyflow/services/agent-notifier/agentnotifier"
	"github.com/policyflow/policyflow/services/runtime"
)

func main() { runtime.Main(agentnotifier.Stage()) }
