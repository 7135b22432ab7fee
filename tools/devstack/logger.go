package devstack

import (
	"fmt"
	"strings"

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

// ParseLogLevel reads the log levels the dev stack's flags accept: none
// (or off, disabled), error, warn, info or debug.
func ParseLogLevel(s string) (zerolog.Level, error) {
	switch strings.ToLower(s) {
	case "none", "off", "disabled":
		return zerolog.Disabled, nil
	case "error":
		return zerolog.ErrorLevel, nil
	case "warn", "warning":
		return zerolog.WarnLevel, nil
	case "info":
		return zerolog.InfoLevel, nil
	case "debug":
		return zerolog.DebugLevel, nil
	}
	return zerolog.NoLevel, fmt.Errorf("log level %q: want none, error, warn, info or debug", s)
}
