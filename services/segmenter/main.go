// Command segmenter cuts each deployment's policy delta into size-bounded,
// ordered pieces on policy.segments.
package main

import (
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/services/segmenter/segment"
)

func main() { runtime.Main(segment.Stage()) }
