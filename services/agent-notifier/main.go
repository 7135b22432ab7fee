// Command agent-notifier tells components that their policies changed: it
// runs each component's reconfigure script or calls its webhook, at least
// once per update, never two at once for a component, and not again once
// a run finished unless a catch-up, a repair or an operator asks.
package main

import (
	"github.com/policyflow/policyflow/services/agent-notifier/agentnotifier"
	"github.com/policyflow/policyflow/services/runtime"
)

func main() { runtime.Main(agentnotifier.Stage()) }
