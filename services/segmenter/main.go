// Command segmenter fills in the policy bodies of each deployment's delta
// from policy.catalog and cuts it into size-bounded, ordered pieces on
// policy.segments.
package main

import (
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/services/segmenter/segmenter"
)

func main() { runtime.Main(segmenter.Stage()) }
