package northapi

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"net/http"
	"sync"

	"github.com/policyflow/policyflow/services/internal/web"
)

// openAPIDocument is the OpenAPI 3 document of the API, served at
// /openapi.json. A test checks that it describes exactly the routes the
// mux registers, and that it is valid OpenAPI 3.
//
//go:embed openapi.json
var openAPIDocument []byte

// OpenAPI returns the OpenAPI 3 document of the North API.
func OpenAPI() []byte { return append([]byte(nil), openAPIDocument...) }

func (s *Server) openAPI(w http.ResponseWriter, _ *http.Request) *web.Error {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(openAPIDocument)
	return nil
}

//go:embed ui/index.html
var ui embed.FS

// statusPage serves the status page. It holds no data: its script asks
// /v1/status with the token the reader gives in its form (kept in the
// tab's sessionStorage only), so the page needs no token itself.
func (s *Server) statusPage(w http.ResponseWriter, r *http.Request) *web.Error {
	if r.URL.Path != "/ui/" {
		return web.Errorf(http.StatusNotFound, "no page at %s; the status page is /ui/", r.URL.Path)
	}
	page, err := ui.ReadFile("ui/index.html")
	if err != nil {
		return web.Errorf(http.StatusInternalServerError, "status page: %v", err)
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	// Only its own script and style, and requests to this origin.
	h.Set("Content-Security-Policy", "default-src 'none'; script-src '"+scriptHash(page)+"'; style-src 'unsafe-inline'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	_, _ = w.Write(page)
	return nil
}

var (
	scriptHashOnce sync.Once
	scriptHashVal  string
)

// scriptHash is the CSP source of the page's one inline script: only that
// script runs, whatever else a page could be made to hold.
func scriptHash(page []byte) string {
	scriptHashOnce.Do(func() {
		body := page
		if i := bytes.Index(body, []byte("<script>")); i >= 0 {
			body = body[i+len("<script>"):]
			if j := bytes.Index(body, []byte("</script>")); j >= 0 {
				body = body[:j]
			}
		}
		sum := sha256.Sum256(body)
		scriptHashVal = "sha256-" + base64.StdEncoding.EncodeToString(sum[:])
	})
	return scriptHashVal
}
