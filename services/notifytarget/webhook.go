package notifytarget

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ErrNoWebhookHosts is why every webhook is refused when the operator
// allowed no host.
var ErrNoWebhookHosts = errors.New("no webhook may be called here: no host is allowed; " +
	"set --webhook-allow (env PF_WEBHOOK_ALLOW) on the North API and the agent-notifier, or notify by script")

// hostPattern is one --webhook-allow entry: a DNS name (or every name
// under a domain, "*.example.com"), or an address prefix (an address is
// a prefix of full length), with a port or any port.
type hostPattern struct {
	raw    string
	name   string // lower case, no trailing dot; "" for an address prefix
	suffix bool   // "*.name": names under name, not name itself
	prefix netip.Prefix
	port   uint16 // 0: any
}

func parsePattern(s string) (hostPattern, error) {
	p := hostPattern{raw: s}
	if strings.Contains(s, "://") || strings.ContainsAny(s, "@?#") {
		return p, errors.New("give a host, host:port, *.domain, IP address or CIDR prefix, not a URL")
	}
	host, port := s, ""
	switch {
	case strings.HasPrefix(s, "["):
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return p, errors.New("missing ']' after an IPv6 address")
		}
		host, port = s[1:end], s[end+1:]
		if port != "" {
			if port[0] != ':' {
				return p, errors.New("want [address]:port")
			}
			port = port[1:]
		}
	case strings.Count(s, ":") == 1:
		host, port, _ = strings.Cut(s, ":")
	}
	if port != "" {
		n, err := strconv.ParseUint(port, 10, 16)
		if err != nil || n == 0 {
			return p, fmt.Errorf("port %q: want 1 to 65535", port)
		}
		p.port = uint16(n)
	}
	if pfx, err := netip.ParsePrefix(host); err == nil {
		if pfx.Addr().Is4In6() || pfx.Addr().Zone() != "" {
			return p, errors.New("give an IPv4 prefix as a.b.c.d/n and an IPv6 prefix without a zone")
		}
		p.prefix = pfx.Masked()
		return p, nil
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return p, errors.New("give the address without a zone")
		}
		a = a.Unmap()
		p.prefix = netip.PrefixFrom(a, a.BitLen())
		return p, nil
	}
	name := strings.TrimSuffix(strings.ToLower(host), ".")
	if rest, ok := strings.CutPrefix(name, "*."); ok {
		p.suffix, name = true, rest
	}
	if !validName(name) {
		return p, fmt.Errorf("%q is not a host name, *.domain, IP address or CIDR prefix", host)
	}
	p.name = name
	return p, nil
}

// validName accepts a DNS name: dot-separated labels of letters, digits,
// '-' and '_', none empty, none over 63 bytes.
func validName(n string) bool {
	if n == "" || len(n) > 253 {
		return false
	}
	for _, label := range strings.Split(n, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for _, c := range []byte(label) {
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

func (p hostPattern) portOK(port uint16) bool { return p.port == 0 || p.port == port }

// namesHost reports whether a name pattern allows host, a DNS name (an
// address never matches a name pattern: what it reaches is decided by
// the address patterns alone).
func (p hostPattern) namesHost(host string, port uint16) bool {
	if p.name == "" || !p.portOK(port) {
		return false
	}
	if p.suffix {
		return strings.HasSuffix(host, "."+p.name)
	}
	return host == p.name
}

func (p hostPattern) hasAddr(a netip.Addr, port uint16) bool {
	return p.name == "" && p.portOK(port) && p.prefix.Contains(a)
}

// WebhookAllow lists the allowed patterns as the operator gave them.
func (r Rules) WebhookAllow() []string {
	out := make([]string, len(r.hosts))
	for i, h := range r.hosts {
		out[i] = h.raw
	}
	return out
}

// hostPort returns the URL's host, lower case and without a trailing dot
// (an address unmapped), and its port, the scheme's when none is given.
func hostPort(u *url.URL) (string, uint16, error) {
	host := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil || n == 0 {
		return "", 0, fmt.Errorf("port %q is not a port number", port)
	}
	return host, uint16(n), nil
}

// anyMatches reports whether one of patterns names host:port as written.
func anyMatches(patterns []hostPattern, host string, port uint16) bool {
	a, err := netip.ParseAddr(host)
	for _, p := range patterns {
		if err == nil && p.hasAddr(a.Unmap(), port) || err != nil && p.namesHost(host, port) {
			return true
		}
	}
	return false
}

// refusedErr says that host:port is one of the refused addresses.
func (r Rules) refusedErr(hostport string) error {
	refused := make([]string, len(r.refused))
	for i, p := range r.refused {
		refused[i] = p.raw
	}
	return fmt.Errorf("%s serves this stack itself, which no webhook may reach (refused: %s); send webhooks to another port",
		hostport, strings.Join(refused, ", "))
}

// CheckWebhook says whether raw may be called as a webhook: an absolute
// http or https URL whose host and port an allowed pattern names. Where it
// connects is checked again when it is dialled (see Client). Errors show
// the URL masked.
func (r Rules) CheckWebhook(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Hostname() == "" {
		return nil, fmt.Errorf("webhook_url %s is not an absolute http or https URL, e.g. http://host:8080/policies", MaskURL(raw))
	}
	if len(r.hosts) == 0 {
		if r.flag != "" {
			return nil, fmt.Errorf("no host is allowed to be called here: set %s", r.flagRef())
		}
		return nil, ErrNoWebhookHosts
	}
	host, port, err := hostPort(u)
	if err != nil {
		return nil, fmt.Errorf("webhook_url %s: %w", MaskURL(raw), err)
	}
	if anyMatches(r.refused, host, port) {
		return nil, fmt.Errorf("webhook_url %s: %w", MaskURL(raw), r.refusedErr(net.JoinHostPort(host, strconv.Itoa(int(port)))))
	}
	if !anyMatches(r.hosts, host, port) {
		return nil, fmt.Errorf("webhook_url %s: host %s is not allowed; webhooks go only to %s (%s)",
			MaskURL(raw), net.JoinHostPort(host, strconv.Itoa(int(port))), strings.Join(r.WebhookAllow(), ", "), r.flagRef())
	}
	return u, nil
}

// metadataAddrs are cloud instance metadata services outside the
// link-local range.
var metadataAddrs = []netip.Addr{
	netip.MustParseAddr("fd00:ec2::254"),   // AWS over IPv6
	netip.MustParseAddr("100.100.100.200"), // Alibaba Cloud
}

// reserved names the kind of an address a DNS name may not lead to unless
// an address pattern allows it, or "" for an ordinary address.
func reserved(a netip.Addr) string {
	switch {
	case a.IsLoopback():
		return "loopback"
	case a.IsLinkLocalUnicast(), a.IsLinkLocalMulticast():
		return "link-local"
	case a.IsUnspecified():
		return "unspecified"
	case a.IsMulticast(), a.IsInterfaceLocalMulticast():
		return "multicast"
	case a.Is4() && a.As4()[0] == 0:
		return "this-network"
	case a == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return "broadcast"
	}
	for _, m := range metadataAddrs {
		if a == m {
			return "cloud metadata"
		}
	}
	return ""
}

// checkDial decides whether a webhook for host (as in the URL) may connect
// to address (the resolved ip:port): when an address pattern allows it, or
// when a name pattern allows host and the address is not loopback,
// link-local, unspecified, multicast or a metadata service.
func (r Rules) checkDial(host, address string) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("webhook host %s: dial address %q: %w", host, address, err)
	}
	a, port := ap.Addr().Unmap(), ap.Port()
	if anyMatches(r.refused, a.String(), port) {
		return fmt.Errorf("webhook host %s: address %w", host, r.refusedErr(ap.String()))
	}
	named := false
	for _, p := range r.hosts {
		if p.hasAddr(a, port) {
			return nil
		}
		named = named || p.namesHost(host, port)
	}
	kind := reserved(a)
	switch {
	case named && kind == "":
		return nil
	case named:
		return fmt.Errorf("webhook host %s resolves to %s, a %s address, which is reached only when allowed by address: %s %s",
			host, a, kind, r.flagName(), a)
	}
	return fmt.Errorf("webhook host %s: address %s is not allowed (%s: %s)", host, ap, r.flagName(), strings.Join(r.WebhookAllow(), ", "))
}

// dialContext dials like base, refusing (in base's Control, once the name
// is resolved and before connecting) every address checkDial refuses.
func (r Rules) dialContext(base *net.Dialer) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, fmt.Errorf("webhook: dial %s: %w", addr, err)
		}
		host = strings.TrimSuffix(strings.ToLower(host), ".")
		d := *base
		d.Control = func(_, address string, _ syscall.RawConn) error { return r.checkDial(host, address) }
		return d.DialContext(ctx, network, addr)
	}
}

// Client is the HTTP client webhooks are called with: it connects only
// where the rules allow, checked on the resolved address when it dials;
// it uses no proxy (a proxy would connect on its behalf); it follows no
// redirect (a 3xx answer is returned as it is). maxIdlePerHost bounds
// the connections kept per host, and the connections kept in all are at
// least as many: the default 100 in all would close, after each call,
// the connections of calls in flight beyond it to one busy host, and the
// next calls would connect again.
func (r Rules) Client(maxIdlePerHost int) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil
	tr.DialContext = r.dialContext(&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second})
	tr.MaxIdleConnsPerHost = maxIdlePerHost
	tr.MaxIdleConns = max(tr.MaxIdleConns, maxIdlePerHost)
	return &http.Client{
		Transport:     tr,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}
