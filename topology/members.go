package topology

import "fmt"

// InputUse is what one input topic lets a consumer group use.
type InputUse struct {
	Topic      string `json:"topic"` // base name
	Partitions int32  `json:"partitions"`
	// Members is how many members of a group reading the topic get
	// records from it: its partitions, or fewer when its records have
	// fewer keys (Topic.Keys).
	Members int32 `json:"members"`
}

// StageUse is how many members a stage's consumer group can use.
type StageUse struct {
	Stage  string     `json:"stage"`
	Inputs []InputUse `json:"inputs"`
	// Members is how many members get work: the most any input gives
	// (a member beyond it is assigned no partition, or only partitions
	// of inputs that see no records). Co-partitioned inputs have equal
	// counts, and one member takes the same partition of each.
	Members int32 `json:"members"`
	// Why says what bounds Members.
	Why string `json:"bounded_by"`
}

// Members says how many members a stage whose group reads inputs (base
// names) can use under o: each member of a consumer group is assigned
// whole partitions, so a stage scales out to the partition count of its
// busiest input and no further. An input whose keys the design fixes
// (Topic.Keys) bounds the stage by them whatever its other inputs: the
// stage's decisions go through those keys (admission decides every
// deployment request in one order). An input not in the topology is an
// error.
func Members(stage string, inputs []string, o Options) (StageUse, error) {
	u := StageUse{Stage: stage}
	var keyed *StageUse // the bound of inputs whose keys are fixed
	for _, name := range inputs {
		t, ok := Find(name)
		if !ok {
			return StageUse{}, fmt.Errorf("stage %s reads %s, which the topology does not have", stage, name)
		}
		in := InputUse{Topic: name, Partitions: o.PartitionsOf(t)}
		in.Members = in.Partitions
		why := fmt.Sprintf("the %d partitions of %s", in.Partitions, name)
		if t.Keys > 0 {
			in.Members = min(in.Members, int32(t.Keys))
			why = fmt.Sprintf("%s has %d key (%s): its records are decided by %d member, in one order", name, t.Keys, t.Key, in.Members)
			if keyed == nil || in.Members < keyed.Members {
				keyed = &StageUse{Members: in.Members, Why: why}
			}
		}
		if in.Members > u.Members {
			u.Members, u.Why = in.Members, why
		}
		u.Inputs = append(u.Inputs, in)
	}
	if keyed != nil {
		u.Members, u.Why = keyed.Members, keyed.Why
	}
	return u, nil
}
