package agentnotifier

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/policyflow/policyflow/services/consulkv"
	"github.com/policyflow/policyflow/services/runtime"
)

// consulParallel is how many claim transactions, and as many outcome
// record transactions, are in flight at once.
const consulParallel = 8

// maxTxnOps is the most operations Consul accepts in one transaction.
const maxTxnOps = consulkv.MaxTxnOps

// maxTxnBytes bounds the keys and values of one transaction: base64 and
// JSON make them about a third bigger on the wire, still well under
// Consul's request limit.
const maxTxnBytes = consulkv.MaxTxnBytes / 2

// leaseSlack is how long after the lease it waits for ends a record is
// looked at again, so that this notifier's clock says it ended.
const leaseSlack = 10 * time.Millisecond

// readOps is how many operations a job's read takes: one get-tree of its
// component's folder (items, event key and claim).
const readOps = 1

// read reads, for jobs, each claim and the component's items, in
// consistent read-only transactions shared by several jobs (readGroups),
// and returns the jobs still to be notified, each with its claim's
// ModifyIndex and its notification built from the items as Consul holds
// them now. A job whose notification cannot be built is handed to bad with
// a Permanent error and left out. A Consul error is returned: nothing is
// claimed, and the jobs are left for the runtime to hand in again.
func (n *notifier) read(ctx context.Context, jobs []*job, bad func(*job, error)) ([]*job, error) {
	var todo []*job
	for _, g := range readGroups(jobs) {
		folders, err := n.get(ctx, g)
		if err != nil {
			return nil, fmt.Errorf("agent-notifier: read claim %s and the policies of %d component(s): %w", g[0].key, len(g), err)
		}
		for k, j := range g {
			if n.decide(j, folders[k], bad) {
				todo = append(todo, j)
			}
		}
	}
	return todo, nil
}

// decide says, from what Consul holds of its component (f), whether
// job j is notified now, and if so sets what its claim and notification
// need: the claim's ModifyIndex, the attempts made before, what the
// component was told, and the body. false: not notified now (skipped, or
// handed to bad).
func (n *notifier) decide(j *job, f folderRead, bad func(*job, error)) bool {
	prior := j.readClaim(f.claim)
	if later, ok := laterInConsul(f.event, j.a.Generation); ok {
		// The folder already holds a later generation: notified
		// now, the component would be told that generation's
		// policies under this one's number, and then again. The
		// later generation's record, which follows this one on
		// component.applied, tells it of both.
		j.log.Info().Int64("consul_generation", later).Msg("not notified: Consul already holds a later generation, whose record notifies the component")
		return false
	}
	seen := n.seen(prior, j)
	act, why := ClaimAction(prior, j.a, seen)
	if act == Wait {
		until, _ := leaseEnd(prior)
		n.waits.note(j, true, cmp.Or(prior.Owner, "an older notifier"), until)
	} else {
		n.waits.note(j, false, "", time.Time{})
	}
	switch act {
	case Skip:
		j.log.Info().Str("reason", why).Msg("not notified again")
		return false
	case Wait:
		err := fmt.Errorf("agent-notifier: component %s update %s: %s; tried again until it finishes or its lease ends: %w",
			j.a.ComponentID, j.a.UpdateID, why, ErrClaimTaken)
		if until, ok := leaseEnd(prior); ok {
			// Tried again on the runtime's backoff, and at the latest
			// right after the lease ends.
			err = runtime.RetryAfter(err, until.Sub(seen.Now)+leaseSlack)
		}
		bad(j, err)
		return false
	}
	if prior != nil {
		j.renotified = prior.Renotify
	}
	if j.again == AgainAlways {
		j.renotified = j.request
	}
	toldAgain, ok := n.runAgain(j, prior, why, bad)
	if !ok {
		return false
	}
	if !j.a.Uninstalled && len(j.a.PolicyRefs) > 0 && len(f.items) == 0 && (f.event == nil || f.event.ModifyIndex == 0) {
		// Consul answers a read the token may not make with nothing
		// rather than an error: an empty notification would be sent
		// for a component that holds policies.
		scn := j.a.ServiceComponentName
		bad(j, runtime.Permanentf("agent-notifier: component %s update %s: Consul shows no %s, so its policies cannot be read: "+
			"the folder was deleted since (the component was uninstalled), or the agent-notifier's Consul token may not read it "+
			"(grant key_prefix %q { policy = \"read\" })", j.a.ComponentID, j.a.UpdateID, consulkv.EventKey(scn), consulkv.Folder(scn)))
		return false
	}
	return j.build(prior, f.items, toldAgain, bad)
}

// readClaim sets the job's claim index from the claim pair as read (0:
// none) and returns the claim, nil when there is none or it cannot be
// read (it is replaced).
func (j *job) readClaim(p *api.KVPair) *consulkv.Claim {
	j.index = 0
	if p.ModifyIndex == 0 {
		return nil
	}
	j.index = p.ModifyIndex
	c, err := consulkv.ParseClaim(p.Value)
	if err != nil {
		j.log.Warn().Err(err).Str("key", j.key).Msg("claim unreadable; it is replaced")
		return nil
	}
	return &c
}

// runAgain handles the prior claim this notification runs after. One left
// unfinished by another notifier run, of this generation or an older one
// (ClaimAction let it be taken over), has what that run left running
// stopped first, so that the two runs never overlap. One of this very
// generation carries its attempts over, and toldAgain says it told the
// component (it ran to its end, ok) and this one tells it again. ok is
// false when what was left running did not stop (handed to bad).
func (n *notifier) runAgain(j *job, prior *consulkv.Claim, why string, bad func(*job, error)) (toldAgain, ok bool) {
	if prior == nil {
		return false, true
	}
	same := prior.Generation == j.a.Generation
	done, finishedOK := prior.Finished()
	if same {
		j.attempts = prior.Attempts
	}
	if !done && prior.Owner != n.owner {
		killed, stopped := n.stopLeft(prior, j)
		if !stopped {
			bad(j, fmt.Errorf("agent-notifier: component %s update %s: what the notifier %s left running did not stop: %w",
				j.a.ComponentID, j.a.UpdateID, prior.Owner, ErrClaimTaken))
			return false, false
		}
		if killed > 0 && same {
			j.attempts++ // the run it stopped
		}
	}
	switch {
	case same:
		j.log.Warn().Str("reason", why).Int("attempts_before", j.attempts).Msg("notification run again")
	case !done:
		j.log.Warn().Str("reason", why).Int64("claimed_generation", prior.Generation).Str("owner", prior.Owner).
			Msg("the unfinished claim of an older generation is taken over")
	}
	return same && done && finishedOK, true
}

// build sets what the component was told before (base) and the body of
// its notification: the policies of items that are news since then. A
// body that cannot be built is handed to bad.
func (j *job) build(prior *consulkv.Claim, items api.KVPairs, toldAgain bool, bad func(*job, error)) bool {
	if prior != nil {
		j.base = prior.Told
	} else {
		// Never notified (no claim): it was told nothing, so
		// everything it holds is news to it, also when the
		// generations that brought it were skipped.
		j.base = map[string]consulkv.Told{}
	}
	since := j.base
	if toldAgain {
		// Told before, and now again (a repair, an operator's
		// request): every policy it holds is news again, as the
		// component may have read something else meanwhile.
		since = map[string]consulkv.Told{}
	}
	body, told, err := PayloadSince(j.a, items, since)
	j.told = told
	if err != nil {
		bad(j, runtime.Permanent(fmt.Errorf("agent-notifier: component %s: %w", j.a.ComponentID, err)))
		return false
	}
	j.body = body
	return true
}

// readGroups cuts jobs, keeping their order, into reads of one
// transaction: at most maxTxnOps operations and maxTxnBytes of
// keys, and folders expected to hold at most consulkv.ReadTxnBytes of
// bodies (the size of the record's collection: a later update seldom
// changes it much); a job expected over it is read on its own.
func readGroups(jobs []*job) [][]*job {
	var out [][]*job
	start, keys, bodies := 0, 0, int64(0)
	for k, j := range jobs {
		kb, b := len(j.key)+len(consulkv.ItemsPrefix(j.a.ServiceComponentName)), j.a.PoliciesBytes
		if k > start && ((k-start+1)*readOps > maxTxnOps || keys+kb > maxTxnBytes || bodies+b > consulkv.ReadTxnBytes) {
			out = append(out, jobs[start:k])
			start, keys, bodies = k, 0, 0
		}
		keys += kb
		bodies += b
	}
	if start < len(jobs) {
		out = append(out, jobs[start:])
	}
	return out
}

// folderRead is what a read transaction returned for one job: its claim
// (ModifyIndex 0 when there is none), its component's event key (nil or
// ModifyIndex 0 when Consul shows none) and its item keys.
type folderRead struct {
	claim *api.KVPair
	event *api.KVPair
	items api.KVPairs
}

// get reads, for each of jobs (at most maxTxnOps/readOps), the
// component's whole folder in one get-tree: its items, its event key and
// its claim, in one consistent transaction. A claim that does not exist
// comes back with ModifyIndex 0. Jobs of the same component share one read.
func (n *notifier) get(ctx context.Context, jobs []*job) ([]folderRead, error) {
	var scns []string // each component's service_component_name, once
	byFolder := map[string]*folderRead{}
	for _, j := range jobs {
		scn := j.a.ServiceComponentName
		if byFolder[scn] == nil {
			byFolder[scn] = &folderRead{}
			scns = append(scns, scn)
		}
	}
	ops := make(api.TxnOps, 0, readOps*len(scns))
	for _, scn := range scns {
		ops = append(ops, &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVGetTree, Key: consulkv.Folder(scn)}})
	}
	cctx, cancel := context.WithTimeout(ctx, consulTimeout)
	defer cancel()
	ok, resp, _, err := n.txn.Txn(ops, (&api.QueryOptions{RequireConsistent: true}).WithContext(cctx))
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("the read was refused: %s", consulkv.TxnReasons(resp))
	}
	// Results come folder after folder, each folder's keys under its
	// prefix (none when it is empty or the token may not read it); no
	// folder lies inside another, as a service_component_name holds no
	// "/".
	k := 0
	for _, r := range resp.Results {
		if r == nil || r.KV == nil {
			continue
		}
		for k < len(scns) && !strings.HasPrefix(r.KV.Key, consulkv.Folder(scns[k])) {
			k++
		}
		if k == len(scns) {
			return nil, fmt.Errorf("the read returned %s, which is in no folder read", r.KV.Key)
		}
		scn, fr := scns[k], byFolder[scns[k]]
		switch key := r.KV.Key; {
		case key == consulkv.ClaimKey(scn):
			fr.claim = r.KV
		case key == consulkv.EventKey(scn):
			fr.event = r.KV
		case strings.HasPrefix(key, consulkv.ItemsPrefix(scn)):
			fr.items = append(fr.items, r.KV)
		}
	}
	out := make([]folderRead, len(jobs))
	for i, j := range jobs {
		out[i] = *byFolder[j.a.ServiceComponentName]
		if out[i].claim == nil {
			out[i].claim = &api.KVPair{Key: j.key}
		}
	}
	return out, nil
}

// errClaimDenied is wrapped by the error of a claim Consul refused to
// write because the token may not.
var errClaimDenied = errors.New("claim denied")

// claimAll writes the pending claims of jobs with check-and-set, many in
// one transaction, before anyone is notified, and returns the jobs
// claimed. A transaction that fails a check is claimed again one job at a
// time, so a conflict holds up only its own component. A Consul error
// fails the first job it left unclaimed and ends the claiming.
func (n *notifier) claimAll(ctx context.Context, jobs []*job, fail func(*job, error)) []*job {
	// Taken before any claim is sent: the lease of each is counted from
	// here (fence).
	start := n.now()
	now := start.UTC()
	for _, j := range jobs {
		j.claim = consulkv.Claim{UpdateID: j.a.UpdateID, Generation: j.a.Generation, At: now.Format(time.RFC3339Nano), Owner: n.owner, Instance: n.instance, Attempts: j.attempts, Told: j.base,
			LeaseUntil: now.Add(n.lease()).Format(time.RFC3339Nano), Runner: n.runner, ConsulIndex: j.a.ConsulIndex, Renotify: j.renotified}
		j.leased = start
	}
	var claimed []*job
	for _, g := range groups(jobs) {
		ok, err := n.cas(ctx, g)
		if (err == nil && !ok || errors.Is(err, errClaimDenied)) && len(g) > 1 {
			// Claimed one at a time, so a failed check or a denied claim
			// holds up only its own component.
			for _, j := range g {
				if ok, err = n.cas(ctx, []*job{j}); err != nil {
					fail(j, fmt.Errorf("agent-notifier: claim %s for update %s: %w", j.key, j.a.UpdateID, err))
					if runtime.IsPermanent(err) {
						continue
					}
					return claimed
				}
				if !ok {
					fail(j, fmt.Errorf("agent-notifier: claim %s for update %s: %w", j.key, j.a.UpdateID, ErrClaimTaken))
					continue
				}
				claimed = append(claimed, j)
			}
			continue
		}
		switch {
		case err != nil:
			fail(g[0], fmt.Errorf("agent-notifier: claim %s for update %s: %w", g[0].key, g[0].a.UpdateID, err))
			if runtime.IsPermanent(err) {
				continue
			}
			return claimed
		case !ok:
			fail(g[0], fmt.Errorf("agent-notifier: claim %s for update %s: %w", g[0].key, g[0].a.UpdateID, ErrClaimTaken))
		default:
			claimed = append(claimed, g...)
		}
	}
	return claimed
}

// record completes the claims of jobs with their outcomes in one
// transaction, retrying a while when Consul does not answer. When a claim
// changed meanwhile the transaction fails as a whole, and each is recorded
// alone. A job whose outcome could not be recorded gets j.unrecorded: its
// record is handed in again and, its claim still unfinished, notified
// again (at least once).
func (n *notifier) record(ctx context.Context, jobs []*job) {
	for attempt := 0; attempt < 8; attempt++ {
		ok, err := n.cas(ctx, jobs)
		if err == nil {
			switch {
			case ok:
				for _, j := range jobs {
					j.ambiguous = false
				}
			case len(jobs) == 1:
				if jobs[0].ambiguous {
					if c := n.readBack(ctx, jobs[0]); c != nil {
						if done, _ := c.Finished(); done {
							return // this very outcome, whose answer was lost
						}
						continue // still this run's: recorded at the index read
					}
				}
				// Another notifier took the claim over (this one was
				// thought gone): the update is its now.
				jobs[0].log.Warn().Str("key", jobs[0].key).Msg("claim changed before the outcome was recorded; outcome not recorded")
			default:
				for _, j := range jobs {
					n.record(ctx, []*job{j})
				}
			}
			return
		}
		for _, j := range jobs {
			j.ambiguous = true // the write may have gone through
		}
		n.log.Warn().Err(err).Str("key", jobs[0].key).Int("claims", len(jobs)).Msg("record the notification outcome; retrying")
		select {
		case <-ctx.Done():
			return
		case <-time.After(n.retry.Next(attempt)):
		}
	}
	for _, j := range jobs {
		j.unrecorded = true
		j.log.Error().Str("key", j.key).Msg("notification outcome not recorded: Consul did not answer; the update will be notified again")
	}
}

// cas sets the key of each job to its claim if the key's ModifyIndex is
// still the job's index (0: the key must not exist), all in one
// transaction, and moves each job's index to the new ModifyIndex. It
// reports false, writing nothing, when a check failed.
func (n *notifier) cas(ctx context.Context, jobs []*job) (bool, error) {
	return n.casOrCheck(ctx, jobs, func(*job) bool { return true })
}

// casOrCheck is cas for the jobs write says, and for the others only the
// check: their key's ModifyIndex must still be their index, and stays
// it. Without a write it is a consistent read.
func (n *notifier) casOrCheck(ctx context.Context, jobs []*job, write func(*job) bool) (bool, error) {
	ops := make(api.TxnOps, len(jobs))
	for k, j := range jobs {
		if write(j) {
			ops[k] = &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVCAS, Key: j.key, Value: j.claim.JSON(), Index: j.index}}
		} else {
			ops[k] = &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVCheckIndex, Key: j.key, Index: j.index}}
		}
	}
	cctx, cancel := context.WithTimeout(ctx, consulTimeout)
	defer cancel()
	// Consistent: a check alone is answered by the leader once it
	// confirmed it still leads (writes are consistent anyway).
	ok, resp, _, err := n.txn.Txn(ops, (&api.QueryOptions{RequireConsistent: true}).WithContext(cctx))
	if err == nil && !ok && consulkv.TxnDenied(resp) {
		// Retrying cannot help until an operator grants the right; read as
		// a check that failed it would be retried for ever.
		key := jobs[0].key
		if len(jobs) == 1 {
			return false, runtime.Permanent(fmt.Errorf("%w: Consul denied the agent-notifier's token the write of its claim %s: grant it key %q { policy = \"write\" }: %s",
				errClaimDenied, key, key, consulkv.TxnReasons(resp)))
		}
		return false, fmt.Errorf("%w: %s", errClaimDenied, consulkv.TxnReasons(resp))
	}
	if err != nil || !ok {
		return false, err
	}
	index := consulkv.TxnIndexes(resp)
	for _, j := range jobs {
		if _, ok := index[j.key]; !ok {
			return false, fmt.Errorf("set %s: Consul did not report its index", j.key)
		}
	}
	for _, j := range jobs {
		j.index = index[j.key]
	}
	return true, nil
}

// groups cuts jobs, keeping their order, into transactions of at most
// maxTxnOps claims and maxTxnBytes of keys and claims.
func groups(jobs []*job) [][]*job {
	var out [][]*job
	start, size := 0, 0
	for k, j := range jobs {
		s := txnSize(j)
		if k > start && (k-start == maxTxnOps || size+s > maxTxnBytes) {
			out = append(out, jobs[start:k])
			start, size = k, 0
		}
		size += s
	}
	if start < len(jobs) {
		out = append(out, jobs[start:])
	}
	return out
}

// txnSize is about what a job's claim adds to a transaction.
func txnSize(j *job) int { return len(j.key) + len(j.claim.JSON()) }

// laterInConsul reports the generation of the component's event key when
// it is later than gen (an event that does not parse counts as none).
func laterInConsul(event *api.KVPair, gen int64) (int64, bool) {
	if event == nil || event.ModifyIndex == 0 {
		return 0, false
	}
	ev, err := consulkv.ParseEvent(event.Value)
	if err != nil || ev.Generation <= gen {
		return 0, false
	}
	return ev.Generation, true
}
