package runtime

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	goruntime "runtime"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/policyflow/policyflow/events"
	"github.com/policyflow/policyflow/topology"
)

// Middleware wraps a handler with what the runtime does around every
// stage's decisions (Watermill's shape): retries, dead-lettering,
// recovering from panics. It wraps the batch shape, which every handler
// runs as: a Handler is handed one record at a time (a batch of one), a
// BatchHandler a poll's records at once, so both share one
// implementation.
type Middleware func(BatchHandler) BatchHandler

// Chain wraps h in mws, the first one outermost.
func Chain(h BatchHandler, mws ...Middleware) BatchHandler {
	for i := len(mws) - 1; i >= 0; i-- {
		h = mws[i](h)
	}
	return h
}

// errStopped is the outcome of the inputs Retry left unhandled because
// its stop signal came while it waited to retry.
var errStopped = errors.New("not handled: the stage is stopping")

// errNotReached is the outcome of the inputs after one whose handling
// failed transiently: they come again with it.
var errNotReached = errors.New("not handled yet: an input before it failed")

// RetryAfter is err, transient, saying when handling the input again may
// first succeed: after d (another process's lease on what the input needs
// ends then, say). Retry hands the input in again after d, or after its
// backoff when that is sooner (what is waited for may end early), but
// never sooner than its first backoff. errors.Is and errors.As see err
// through it.
func RetryAfter(err error, d time.Duration) error { return &retryAfter{err: err, d: d} }

type retryAfter struct {
	err error
	d   time.Duration
}

func (e *retryAfter) Error() string { return e.err.Error() }
func (e *retryAfter) Unwrap() error { return e.err }

// RetryDelay is the delay RetryAfter put on err, if it did.
func RetryDelay(err error) (time.Duration, bool) {
	var ra *retryAfter
	if errors.As(err, &ra) {
		return max(ra.d, 0), true
	}
	return 0, false
}

// Retry hands inputs whose handling failed transiently in again after a
// capped backoff (sooner when the error says when, RetryAfter), until
// they succeed or fail permanently: from the first such input, with every
// input after it (what came before it is kept). It stops waiting when
// stop is closed; the inputs from the failed one on then have an outcome
// saying so, and only those before it count as handled. onRetry, when
// set, is told of each retry (the failed input, how many inputs are
// handed in again, the error, the delay).
func Retry(b Backoff, stop <-chan struct{}, onRetry func(in Input, again int, err error, delay time.Duration)) Middleware {
	return func(next BatchHandler) BatchHandler {
		return func(ctx context.Context, ins []Input) []Outcome {
			out := make([]Outcome, len(ins))
			for start, attempt := 0, 0; ; attempt++ {
				got := counted(next(ctx, ins[start:]), len(ins)-start)
				failed := -1
				for j, oc := range got {
					out[start+j] = oc
					if oc.Err != nil && !IsPermanent(oc.Err) {
						failed = start + j
						break
					}
				}
				if failed < 0 {
					return out
				}
				d := b.Next(attempt)
				if after, ok := RetryDelay(out[failed].Err); ok {
					d = min(d, max(after, b.Next(0)))
				}
				if onRetry != nil {
					onRetry(ins[failed], len(ins)-failed, out[failed].Err, d)
				}
				select {
				case <-stop:
					for i := failed; i < len(ins); i++ {
						out[i] = Outcome{Err: errStopped}
					}
					return out
				case <-time.After(d):
				}
				start = failed
			}
		}
	}
}

// DeadLetter turns the permanent failure of an input into its copy for the
// stage's dead-letter topic (dlq.<stage>), with the reason and where it
// came from in headers (and extra, when given), so the stage goes on.
// onDead, when set, is told of each input dead-lettered.
func DeadLetter(stage string, k Kafka, onDead func(in Input, err error), extra ...kgo.RecordHeader) Middleware {
	return func(next BatchHandler) BatchHandler {
		return func(ctx context.Context, ins []Input) []Outcome {
			out := next(ctx, ins)
			for i, oc := range out {
				if !IsPermanent(oc.Err) {
					continue
				}
				if onDead != nil {
					onDead(ins[i], oc.Err)
				}
				out[i] = Outcome{Outputs: []Output{deadLetter(stage, k, ins[i], oc.Err, extra...)}}
			}
			return out
		}
	}
}

// deadLetter is the dead-letter record of an input that failed with err,
// carrying the extra headers too.
func deadLetter(stage string, k Kafka, in Input, err error, extra ...kgo.RecordHeader) Output {
	// The stage's own headers come first, and a header of the original
	// record under one of their names is kept renamed
	// (HeaderOriginalPrefix): a producer cannot put a reason of its own
	// where an operator or a tool reads the stage's.
	h := []kgo.RecordHeader{
		{Key: HeaderError, Value: []byte(err.Error())},
		{Key: HeaderStage, Value: []byte(stage)},
		{Key: HeaderTopic, Value: []byte(k.Topic(in.Topic))},
		{Key: HeaderPartition, Value: []byte(strconv.Itoa(int(in.Partition)))},
		{Key: HeaderOffset, Value: []byte(strconv.FormatInt(in.Offset, 10))},
		{Key: HeaderFailedAt, Value: []byte(time.Now().UTC().Format(time.RFC3339Nano))},
	}
	h = append(h, extra...)
	ours := len(h)
	for _, o := range in.Headers {
		for _, mine := range h[:ours] {
			if o.Key == mine.Key {
				o.Key = HeaderOriginalPrefix + o.Key
				break
			}
		}
		h = append(h, o)
	}
	return Output{Topic: topology.DLQ(stage), Key: in.Key, Raw: in.Raw, Headers: h}
}

// HeaderOriginalPrefix goes before the name of a header of a dead-lettered
// record that has the name of one the stage sets on its dead letter.
const HeaderOriginalPrefix = "pf.original."

// Recover turns a panic of the handler into a permanent error carrying the
// panic value and an excerpt of the stack, so the input is dead-lettered
// and the stage goes on. When several inputs were handed in together, they
// are handed in again one at a time, so that only the input that panics on
// its own fails (the others are handled again: handlers are idempotent).
func Recover() Middleware {
	return func(next BatchHandler) BatchHandler {
		return func(ctx context.Context, ins []Input) []Outcome {
			out, err := guarded(ctx, next, ins)
			if err == nil {
				return out
			}
			if len(ins) == 1 {
				return []Outcome{{Err: err}}
			}
			out = make([]Outcome, len(ins))
			for i := range ins {
				one, err := guarded(ctx, next, ins[i:i+1])
				if err != nil {
					out[i].Err = err
					continue
				}
				out[i] = one[0]
				if oc := out[i]; oc.Err != nil && !IsPermanent(oc.Err) {
					for j := i + 1; j < len(ins); j++ {
						out[j].Err = errNotReached
					}
					break
				}
			}
			return out
		}
	}
}

// guarded calls h, turning a panic into a permanent error.
func guarded(ctx context.Context, h BatchHandler, ins []Input) (out []Outcome, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = Permanent(fmt.Errorf("handler panicked: %v\n%s", p, stackExcerpt(debug.Stack())))
		}
	}()
	return counted(h(ctx, ins), len(ins)), nil
}

// stackFrames is how many frames of a panicking handler's stack go into
// the dead letter's reason.
const stackFrames = 8

// stackExcerpt keeps the frames of a goroutine's stack from the one that
// panicked on, at most stackFrames of them.
func stackExcerpt(stack []byte) []byte {
	lines := bytes.Split(bytes.TrimSpace(stack), []byte("\n"))
	from := 1 // the goroutine header
	for i, l := range lines {
		if bytes.HasPrefix(l, []byte("panic(")) {
			from = i + 2 // the panic call and its file line
			break
		}
	}
	if from > len(lines) {
		from = len(lines)
	}
	lines = lines[from:min(len(lines), from+2*stackFrames)]
	return bytes.Join(lines, []byte("\n"))
}

// counted checks that a batch handler gave one outcome per input: when it
// did not, every input fails permanently, since which outcome is whose is
// unknown.
func counted(out []Outcome, inputs int) []Outcome {
	if len(out) == inputs {
		return out
	}
	err := Permanentf("batch handler returned %d outcomes for %d inputs", len(out), inputs)
	out = make([]Outcome, inputs)
	for i := range out {
		out[i].Err = err
	}
	return out
}

// decodeValue decodes a record's value (not a tombstone), saying what is
// wrong with one that is not an event: an empty value (a record that is
// neither an event nor a tombstone, which no policyflow writer produces)
// and bytes that do not hold what their schema says are malformed records.
func decodeValue(ctx context.Context, codec *events.Codec, raw []byte) (events.Event, error) {
	if len(raw) == 0 {
		return nil, fmt.Errorf("%w: the value is empty, so neither an event nor a tombstone (which has no value at all)", events.ErrMalformed)
	}
	v, err := codec.Decode(ctx, raw)
	switch {
	case err == nil:
		return v, nil
	case errors.Is(err, events.ErrMalformed):
		return nil, fmt.Errorf("malformed record: %w", err)
	}
	return nil, fmt.Errorf("decode record: %w", err)
}

// predecode decodes the values of ins that are not decoded yet, on every
// core when there are enough of them; an input that fails to decode is
// left as it was, for decoding to fail it with the reason. Decoding is
// most of what a stage does with a record besides its decision, and the
// decision, which keeps state, runs on one goroutine: decoding a poll's
// records beforehand on the other cores takes it off that path.
func predecode(ctx context.Context, codec *events.Codec, ins []Input) {
	workers := min(goruntime.GOMAXPROCS(0), len(ins)/minPerDecoder)
	if workers < 2 {
		return
	}
	Each(len(ins), workers, func(i int) {
		if in := &ins[i]; in.Raw != nil && in.Value == nil {
			if v, err := decodeValue(ctx, codec, in.Raw); err == nil {
				in.Value = v
			}
		}
	})
}

// minPerDecoder is the fewest inputs worth a goroutine of predecode.
const minPerDecoder = 16

// decoding decodes each input's value before the handler sees it; an
// input that cannot be decoded fails permanently without reaching it.
func decoding(codec *events.Codec) Middleware {
	return func(next BatchHandler) BatchHandler {
		return func(ctx context.Context, ins []Input) []Outcome {
			predecode(ctx, codec, ins)
			out := make([]Outcome, len(ins))
			idx := make([]int, 0, len(ins))
			pass := make([]Input, 0, len(ins))
			for i, in := range ins {
				if in.Raw != nil && in.Value == nil {
					v, err := decodeValue(ctx, codec, in.Raw)
					if err != nil {
						out[i].Err = Permanent(err)
						continue
					}
					in.Value = v
				}
				idx = append(idx, i)
				pass = append(pass, in)
			}
			if len(pass) == 0 {
				return out
			}
			for j, oc := range counted(next(ctx, pass), len(pass)) {
				out[idx[j]] = oc
			}
			return out
		}
	}
}

// encoding encodes the events of the handler's outputs; an output that
// cannot be encoded fails its input permanently.
func encoding(codec *events.Codec) Middleware {
	return func(next BatchHandler) BatchHandler {
		return func(ctx context.Context, ins []Input) []Outcome {
			out := counted(next(ctx, ins), len(ins))
			for i := range out {
				outs := out[i].Outputs
				for j := range outs {
					if outs[j].Value == nil {
						continue
					}
					b, err := codec.Encode(outs[j].Value)
					if err != nil {
						out[i] = Outcome{Err: Permanent(fmt.Errorf("output to %s: %w", outs[j].Topic, err))}
						break
					}
					outs[j].Raw, outs[j].Value = b, nil
				}
			}
			return out
		}
	}
}

// oneByOne runs a Handler as a BatchHandler: the inputs one after another,
// in order, up to the first that fails transiently.
func oneByOne(h Handler) BatchHandler {
	return func(ctx context.Context, ins []Input) []Outcome {
		out := make([]Outcome, len(ins))
		for i, in := range ins {
			out[i].Outputs, out[i].Err = h(ctx, in)
			if err := out[i].Err; err != nil && !IsPermanent(err) {
				for j := i + 1; j < len(ins); j++ {
					out[j].Err = errNotReached
				}
				break
			}
		}
		return out
	}
}
