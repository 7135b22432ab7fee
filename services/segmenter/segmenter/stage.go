package segmenter

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"time"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/services/runtime"
	"github.com/policyflow/policyflow/topology"
)

// Config is the segmenter's own configuration.
type Config struct {
	// MaxSegmentBytes is the most one encoded PolicySegment may take.
	MaxSegmentBytes int
}

// DefaultConfig reads PF_MAX_SEGMENT_BYTES, falling back to
// DefaultMaxBytes.
func DefaultConfig() Config {
	c := Config{MaxSegmentBytes: DefaultMaxBytes}
	if v, err := strconv.Atoi(runtime.EnvOr("PF_MAX_SEGMENT_BYTES", "")); err == nil {
		c.MaxSegmentBytes = v
	}
	return c
}

// RegisterFlags adds the segmenter's flags to fs.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.IntVar(&c.MaxSegmentBytes, "max-segment-bytes", c.MaxSegmentBytes,
		"largest encoded policy segment in bytes; a bigger delta is cut into pieces (env PF_MAX_SEGMENT_BYTES)")
}

// Validate says what is wrong with the configuration.
func (c Config) Validate() error {
	if c.MaxSegmentBytes < MinMaxBytes {
		return fmt.Errorf("--max-segment-bytes %d is below the minimum of %d", c.MaxSegmentBytes, MinMaxBytes)
	}
	return nil
}

// Stage is the segmenter configured from the environment (and from flags
// when run by runtime.Main).
func Stage() runtime.Stage { return StageWith(DefaultConfig()) }

// StageWith is the segmenter with the given configuration: it reads
// policy.matches, fills in the body of every policy a match names by
// reference from policy.catalog (followed as a table, see Fill), and
// writes the match to policy.segments as one or more pieces keyed by
// deployment_id, all in the input's transaction.
func StageWith(cfg Config) runtime.Stage {
	c := &cfg
	return runtime.Stage{
		Name:     topology.StageSegmenter,
		Mode:     runtime.Transactional,
		Inputs:   []string{topology.PolicyMatches},
		Outputs:  []string{topology.PolicySegments},
		Flags:    c.RegisterFlags,
		Settings: c,
		Setup: func(ctx context.Context, env runtime.Env) (runtime.Handler, func(), error) {
			if err := c.Validate(); err != nil {
				return nil, nil, err
			}
			if limit := int(env.MaxRecordBytes) - RecordOverhead; env.MaxRecordBytes > 0 && c.MaxSegmentBytes > limit {
				return nil, nil, fmt.Errorf("--max-segment-bytes %d is above %d, the largest record the stage may produce (%d) less %d bytes for the record's framing, key and headers",
					c.MaxSegmentBytes, limit, env.MaxRecordBytes, RecordOverhead)
			}
			log := env.Log.With().Str("stage", topology.StageSegmenter).Logger()
			cat, err := runtime.FollowTable[*events.PolicyCatalogEntry](env, topology.PolicyCatalog, nil)
			if err != nil {
				return nil, nil, fmt.Errorf("segmenter: %w", err)
			}
			if err := cat.WaitCaughtUp(ctx); err != nil {
				cat.Close()
				return nil, nil, fmt.Errorf("segmenter: read %s: %w", env.Kafka.Topic(topology.PolicyCatalog), err)
			}
			rollouts, err := runtime.FollowTable[*events.PolicyRollout](env, topology.PolicyRollouts, nil)
			if err != nil {
				cat.Close()
				return nil, nil, fmt.Errorf("segmenter: %w", err)
			}
			closeAll := func() { cat.Close(); rollouts.Close() }
			if err := rollouts.WaitCaughtUp(ctx); err != nil {
				closeAll()
				return nil, nil, fmt.Errorf("segmenter: read %s: %w", env.Kafka.Topic(topology.PolicyRollouts), err)
			}
			log.Info().Int("policies", cat.Len()).Int("rollouts", rollouts.Len()).Msg("catalog read")
			bodies := catalogAndRollouts{Table: cat, rollouts: rollouts}
			max := c.MaxSegmentBytes
			return runtime.Typed(runtime.RefuseTombstones, func(ctx context.Context, in runtime.Msg[*events.PolicyMatch]) ([]runtime.Output, error) {
				m := in.Value
				notes, err := Fill(ctx, bodies.asOf(in.Polled), m)
				if err != nil {
					return nil, fmt.Errorf("segmenter: %w", err)
				}
				for _, n := range notes {
					e := log.Debug().Str("update_id", m.UpdateID).Str("deployment_id", m.DeploymentID).Str("component_id", n.ComponentID).
						Str("policy_id", n.PolicyID).Str("version", n.WantVersion).Str("body_hash", n.WantHash)
					if n.Dropped {
						e.Msg("policy no longer in the catalog: dropped from the delta, its removal follows")
					} else {
						e.Str("catalog_version", n.GotVersion).Str("catalog_body_hash", n.GotHash).Msg("the catalog holds another version: its latest was taken")
					}
				}
				outs, err := Outputs(env.Codec, m, in.Key, max)
				if err != nil {
					return nil, err
				}
				if len(outs) > 1 {
					log.Info().Str("update_id", m.UpdateID).Str("deployment_id", m.DeploymentID).
						Int("pieces", len(outs)).Msg("policy match cut into pieces")
				}
				return outs, nil
			}), closeAll, nil
		},
	}
}

// catalogAndRollouts is where the stage finds bodies: policy.catalog, and
// the previous versions of policy.rollouts (see Previous).
type catalogAndRollouts struct {
	*runtime.Table[*events.PolicyCatalogEntry]
	rollouts *runtime.Table[*events.PolicyRollout]
	// polled is when the poll of the match in hand returned (asOf); zero
	// for a wait as of the call.
	polled time.Time
}

// asOf is c for a match whose poll returned at polled (Input.Polled):
// every body it may name was committed before the match, so before then.
// Its WaitCaughtUp lists the topics' ends once for all the matches of a
// poll that miss a body, not once per match (a listing is several
// requests to the brokers).
func (c catalogAndRollouts) asOf(polled time.Time) catalogAndRollouts {
	c.polled = polled
	return c
}

func (c catalogAndRollouts) WaitCaughtUp(ctx context.Context) error {
	asOf := c.polled
	if asOf.IsZero() {
		asOf = time.Now()
	}
	if err := c.Table.WaitCaughtUpAsOf(ctx, asOf); err != nil {
		return err
	}
	return c.rollouts.WaitCaughtUpAsOf(ctx, asOf)
}

func (c catalogAndRollouts) Previous(policyID, bodyHash string) (string, bool) {
	r, ok := c.rollouts.Value(policyID)
	if !ok || r == nil || r.PreviousBody == "" || r.PreviousHash != bodyHash {
		return "", false
	}
	return r.PreviousBody, true
}

// Outputs are the policy.segments records of one match: its pieces in
// order, already encoded, keyed by its deployment_id (or by key when the
// match names none). A match that cannot be cut under the limit, or that
// names no deployment at all, is a permanent error.
func Outputs(codec *events.Codec, m *events.PolicyMatch, key []byte, maxBytes int) ([]runtime.Output, error) {
	k := []byte(m.DeploymentID)
	if m.DeploymentID == "" {
		if len(key) == 0 {
			return nil, runtime.Permanentf("segmenter: policy match %s names no deployment_id and has no key", m.UpdateID)
		}
		k = key
	}
	_, encoded, err := split(codec, m, maxBytes)
	if err != nil {
		// Retrying cannot make a delta smaller or its encoding succeed.
		return nil, runtime.Permanent(fmt.Errorf("segmenter: %w", err))
	}
	outs := make([]runtime.Output, len(encoded))
	for i, b := range encoded {
		outs[i] = runtime.Output{Topic: topology.PolicySegments, Key: k, Raw: b}
	}
	return outs, nil
}
