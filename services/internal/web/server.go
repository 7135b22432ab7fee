package web

import (
	"crypto/tls"
	"errors"
	"fmt"
	stdlog "log"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/policyflow/policyflow/services/runtime"
)

// HTTPLimits bound the connections of an API's HTTP server, so a client
// that sends slowly or keeps idle connections open cannot hold the
// server's resources. Zero fields take the defaults.
type HTTPLimits struct {
	// ReadHeaderTimeout bounds reading a request's headers (default 10s).
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a whole request, body included
	// (default 1m; a body of web.MaxPoliciesRequestBytes needs ~1 MiB/s).
	ReadTimeout time.Duration
	// WriteTimeout bounds a request from the end of its headers to the
	// end of its answer (default 2m; a component write waits up to
	// ProduceTimeout plus ViewWait).
	WriteTimeout time.Duration
	// IdleTimeout closes a keep-alive connection idle this long
	// (default 2m).
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's headers (default 64 KiB).
	MaxHeaderBytes int
}

// Defaults of HTTPLimits.
const (
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultReadTimeout       = time.Minute
	DefaultWriteTimeout      = 2 * time.Minute
	DefaultIdleTimeout       = 2 * time.Minute
	DefaultMaxHeaderBytes    = 64 << 10
)

// WithDefaults is l with its zero fields set to the defaults.
func (l HTTPLimits) WithDefaults() HTTPLimits {
	if l.ReadHeaderTimeout <= 0 {
		l.ReadHeaderTimeout = DefaultReadHeaderTimeout
	}
	if l.ReadTimeout <= 0 {
		l.ReadTimeout = DefaultReadTimeout
	}
	if l.WriteTimeout <= 0 {
		l.WriteTimeout = DefaultWriteTimeout
	}
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = DefaultIdleTimeout
	}
	if l.MaxHeaderBytes <= 0 {
		l.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	return l
}

// Server is an HTTP server of h with the limits applied. Its own
// complaints (a client's failed TLS handshake) go to log at debug level.
func (l HTTPLimits) Server(h http.Handler, tlsConfig *tls.Config, log zerolog.Logger) *http.Server {
	l = l.WithDefaults()
	return &http.Server{
		ErrorLog:          stdlog.New(debugWriter{log}, "", 0),
		Handler:           h,
		ReadHeaderTimeout: l.ReadHeaderTimeout,
		ReadTimeout:       l.ReadTimeout,
		WriteTimeout:      l.WriteTimeout,
		IdleTimeout:       l.IdleTimeout,
		MaxHeaderBytes:    l.MaxHeaderBytes,
		TLSConfig:         tlsConfig,
	}
}

// debugWriter writes each line of a standard library logger to a zerolog
// logger at debug level.
type debugWriter struct{ log zerolog.Logger }

func (w debugWriter) Write(p []byte) (int, error) {
	w.log.Debug().Msg(strings.TrimSpace(string(p)))
	return len(p), nil
}

// LoadTLS builds an API's server TLS configuration from PEM files: its
// certificate and key, and when clientCA is given, the CAs a client's
// certificate must be signed by (every client must present one).
func LoadTLS(certFile, keyFile, clientCA string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("load the API's TLS certificate %s and key %s: %w", certFile, keyFile, err)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
	if clientCA != "" {
		pool, err := runtime.CAPool(clientCA)
		if err != nil {
			return nil, fmt.Errorf("client %w", err)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// statusRecorder remembers the status written, for metrics.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// Handler turns h into an http.Handler that runs it in a span of tracer
// (when set), writes its error as JSON (logging the 5xx ones) and counts
// the request under route and its status on requests.
func Handler(route string, h HandlerFunc, tracer *runtime.Tracer, log zerolog.Logger, requests *prometheus.CounterVec) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if tracer != nil {
			// The request's span: the records it produces continue its
			// trace through the pipeline.
			ctx, span := tracer.Start(r.Context(), route)
			defer span.End()
			r = r.WithContext(ctx)
		}
		rec := &statusRecorder{ResponseWriter: w}
		if e := h(rec, r); e != nil {
			if e.Status >= 500 {
				log.Warn().Str("route", route).Int("status", e.Status).Msg(e.Msg)
			}
			WriteError(rec, e)
		}
		if rec.status == 0 {
			rec.status = http.StatusOK
		}
		requests.WithLabelValues(route, strconv.Itoa(rec.status)).Inc()
	})
}

// RegisterCounter registers c on r, or returns the one an API built on
// the same registry registered before.
func RegisterCounter(r *prometheus.Registry, c *prometheus.CounterVec) (*prometheus.CounterVec, error) {
	if err := r.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(*prometheus.CounterVec); ok {
				return existing, nil
			}
		}
		return nil, err
	}
	return c, nil
}
