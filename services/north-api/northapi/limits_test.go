package northapi

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/policyflow/policyflow/services/internal/web"
	"github.com/policyflow/policyflow/services/north-api/auth"
)

// serve runs ServeListener with opts on the stack's Env and returns the
// address it listens on.
func (s *stack) serve(t *testing.T, opts Options) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ServeListener(ctx, s.env, ln, opts) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ServeListener: %v", err)
		}
	})
	return ln.Addr().String()
}

func TestASlowBodyIsCutByTheReadTimeout(t *testing.T) {
	s := newStack(t, nil)
	addr := s.serve(t, Options{Tokens: testTokenSet(t), HTTP: HTTPLimits{ReadTimeout: 500 * time.Millisecond}})
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const size = 1000 // at one byte per 20 ms, 20 s to send
	fmt.Fprintf(conn, "PUT /v1/components/slow HTTP/1.1\r\nHost: api\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", adminToken, size)
	answered := make(chan string, 1)
	go func() {
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			answered <- "connection closed: " + err.Error()
			return
		}
		body, _ := io.ReadAll(resp.Body)
		answered <- fmt.Sprintf("%d %s", resp.StatusCode, body)
	}()
	start := time.Now()
	sent := 0
	var got string
send:
	for ; sent < size; sent++ {
		select {
		case got = <-answered:
			break send
		case <-time.After(20 * time.Millisecond):
		}
		if _, err := conn.Write([]byte(" ")); err != nil {
			got = "write failed: " + err.Error()
			break
		}
	}
	if sent == size {
		t.Fatalf("the server read a body sent at one byte per 20 ms to its end (%s); the read timeout did not cut it", time.Since(start))
	}
	if got == "" {
		got = <-answered
	}
	if !strings.HasPrefix(got, "400 ") && !strings.HasPrefix(got, "connection closed") && !strings.HasPrefix(got, "write failed") {
		t.Errorf("slow body: %s; want a 400 or the connection closed", got)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the slow body was cut after %s, want about the read timeout (500ms)", d)
	}
}

func TestAnIdleConnectionIsClosed(t *testing.T) {
	s := newStack(t, nil)
	addr := s.serve(t, Options{Tokens: testTokenSet(t), HTTP: HTTPLimits{IdleTimeout: 300 * time.Millisecond}})
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /healthcheck HTTP/1.1\r\nHost: api\r\n\r\n")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("healthcheck: %d, close %v; want 200 on a kept-alive connection", resp.StatusCode, resp.Close)
	}
	start := time.Now()
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	_, err = br.ReadByte()
	if !errors.Is(err, io.EOF) {
		t.Fatalf("reading the idle connection: %v; want the server to close it (EOF)", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the idle connection was closed after %s, want about the idle timeout (300ms)", d)
	}
}

// testPKI is a CA, a server certificate for 127.0.0.1 and a client
// certificate, all made for the test, as PEM files in dir.
type testPKI struct {
	dir                       string
	caFile, certFile, keyFile string
	ca                        *x509.CertPool
	client                    tls.Certificate
	strangerClient            tls.Certificate
}

func newPKI(t *testing.T) *testPKI {
	t.Helper()
	p := &testPKI{dir: t.TempDir()}
	caCert, caKey := makeCert(t, "policyflow test CA", nil, nil, true)
	srvCert, srvKey := makeCert(t, "north-api", caCert, caKey, false)
	cliCert, cliKey := makeCert(t, "policyctl", caCert, caKey, false)
	otherCA, otherKey := makeCert(t, "another CA", nil, nil, true)
	strCert, strKey := makeCert(t, "stranger", otherCA, otherKey, false)
	p.caFile = writePEM(t, p.dir, "ca.pem", "CERTIFICATE", caCert.Raw)
	p.certFile = writePEM(t, p.dir, "server.pem", "CERTIFICATE", srvCert.Raw)
	p.keyFile = writePEM(t, p.dir, "server-key.pem", "PRIVATE KEY", marshalKey(t, srvKey))
	p.ca = x509.NewCertPool()
	p.ca.AddCert(caCert)
	p.client = tls.Certificate{Certificate: [][]byte{cliCert.Raw}, PrivateKey: cliKey}
	p.strangerClient = tls.Certificate{Certificate: [][]byte{strCert.Raw}, PrivateKey: strKey}
	return p
}

func makeCert(t *testing.T, cn string, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, isCA bool) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
	}
	if isCA {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
		tmpl.KeyUsage |= x509.KeyUsageCertSign
		tmpl.ExtKeyUsage, tmpl.IPAddresses = nil, nil
	}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

func marshalKey(t *testing.T, k *ecdsa.PrivateKey) []byte {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

func writePEM(t *testing.T, dir, name, typ string, der []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func httpsClient(roots *x509.CertPool, certs ...tls.Certificate) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: certs, MinVersion: tls.VersionTLS12},
	}}
}

func getStatus(c *http.Client, url, token string) (int, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	if token != "" {
		auth.SetBearer(req, token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

func TestTLSAndClientCertificates(t *testing.T) {
	s := newStack(t, nil)
	pki := newPKI(t)

	serverOnly, err := web.LoadTLS(pki.certFile, pki.keyFile, "")
	if err != nil {
		t.Fatal(err)
	}
	// A route that needs a token and answers before the server's views
	// have caught up: 400 for an id with a space.
	const path = "/v1/components/a%20b/status"
	addr := s.serve(t, Options{Tokens: testTokenSet(t), TLS: serverOnly})
	if code, err := getStatus(httpsClient(pki.ca), "https://"+addr+path, adminToken); err != nil || code != http.StatusBadRequest {
		t.Errorf("HTTPS with a token: %d %v; want 400 (bad id)", code, err)
	}
	if code, err := getStatus(httpsClient(pki.ca), "https://"+addr+path, ""); err != nil || code != http.StatusUnauthorized {
		t.Errorf("HTTPS without a token: %d %v; want 401", code, err)
	}
	if code, err := getStatus(http.DefaultClient, "http://"+addr+"/healthcheck", ""); err == nil && code == http.StatusOK {
		t.Errorf("plain HTTP to the HTTPS port answered 200")
	}

	mutual, err := web.LoadTLS(pki.certFile, pki.keyFile, pki.caFile)
	if err != nil {
		t.Fatal(err)
	}
	addr = s.serve(t, Options{Tokens: testTokenSet(t), TLS: mutual})
	if code, err := getStatus(httpsClient(pki.ca, pki.client), "https://"+addr+path, adminToken); err != nil || code != http.StatusBadRequest {
		t.Errorf("mTLS with the client certificate: %d %v; want 400", code, err)
	}
	if _, err := getStatus(httpsClient(pki.ca), "https://"+addr+"/healthcheck", ""); err == nil {
		t.Errorf("mTLS without a client certificate was served")
	}
	if _, err := getStatus(httpsClient(pki.ca, pki.strangerClient), "https://"+addr+"/healthcheck", ""); err == nil {
		t.Errorf("mTLS with a certificate of another CA was served")
	}

	if _, err := web.LoadTLS(pki.certFile, pki.keyFile, pki.certFile+".missing"); err == nil {
		t.Errorf("LoadTLS with a missing client CA file: no error")
	}
}
