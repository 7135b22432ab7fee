package admit

import (
	"fmt"
	"strings"
)

// ConflictRule is the rule of the warning that two policies' mutations
// set the same field of an application.
const ConflictRule = "mutation-conflict"

// conflicts are the warnings that policies of ps (in the order they ran)
// set the same field of one application: each names the policies in the
// order they ran and the winner, the last, whose value the request keeps.
// Scripts are not a conflict: script injections add to each other.
func conflicts(ms []Mutation, ps []*Compiled) []Finding {
	type key struct{ app, field string }
	var keys []key
	setBy := map[key][]Mutation{}
	for _, m := range ms {
		if m.Field == "scripts" {
			continue
		}
		k := key{m.Application, m.Field}
		prev := setBy[k]
		if len(prev) > 0 && prev[len(prev)-1].PolicyID == m.PolicyID {
			// One policy's rules in turn: it knows its own order.
			prev[len(prev)-1] = m
			continue
		}
		if prev == nil {
			keys = append(keys, k)
		}
		setBy[k] = append(prev, m)
	}
	prio := map[string]*Compiled{}
	for _, p := range ps {
		prio[p.ID] = p
	}
	describe := func(id string) string {
		if p := prio[id]; p != nil {
			return fmt.Sprintf("%s (priority %d, created %s)", id, p.Priority, p.Created.UTC().Format("2006-01-02T15:04:05.000Z"))
		}
		return id
	}
	var out []Finding
	for _, k := range keys {
		set := setBy[k]
		if len(set) < 2 {
			continue
		}
		names := make([]string, len(set))
		for i, m := range set {
			names[i] = fmt.Sprintf("%s to %s", describe(m.PolicyID), m.New)
		}
		win := set[len(set)-1]
		out = append(out, Finding{PolicyID: win.PolicyID, Rule: ConflictRule, Object: fmt.Sprintf("application %q", k.app),
			Message: fmt.Sprintf("%s is set by %d policies, in this order: %s; policy %s wins with %s (mutations run by priority, lowest first, then oldest first, then by policy id: give the policy that should win the highest priority)",
				k.field, len(set), strings.Join(names, ", then "), win.PolicyID, win.New)})
	}
	return out
}
