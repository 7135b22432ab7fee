package devstack

import (
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kfake"
)

// kfakeLogger forwards the broker's log lines to zerolog; the zerolog
// logger's level decides what is written.
type kfakeLogger struct{ l zerolog.Logger }

func (k kfakeLogger) Logf(level kfake.LogLevel, msg string, args ...any) {
	var zl zerolog.Level
	switch level {
	case kfake.LogLevelError:
		zl = zerolog.ErrorLevel
	case kfake.LogLevelWarn:
		zl = zerolog.WarnLevel
	case kfake.LogLevelInfo:
		zl = zerolog.InfoLevel
	case kfake.LogLevelDebug:
		zl = zerolog.DebugLevel
	default:
		return
	}
	k.l.WithLevel(zl).Msgf(msg, args...)
}
