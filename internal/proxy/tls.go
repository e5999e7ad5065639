package proxy

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"sync"
	"time"
)

// TLS between regions: the peer listener's certificate (reloaded when its
// file changes) and the CA peers are verified against.

// ServerTLS is the TLS configuration of the proxy's peer listener, or nil
// when it has none. The certificate is read again when its file changes
// (a rotated Kubernetes Secret), looked at most every CertCheckEvery.
func (c Config) ServerTLS() (*tls.Config, error) {
	if c.TLSCert == "" {
		return nil, nil
	}
	r := &certReloader{certFile: c.TLSCert, keyFile: c.TLSKey, now: time.Now}
	if err := r.load(); err != nil {
		return nil, err
	}
	return &tls.Config{GetCertificate: r.get, MinVersion: tls.VersionTLS12}, nil
}

// CertCheckEvery is how often the peer listener looks whether its
// certificate file changed.
const CertCheckEvery = 10 * time.Second

// certReloader serves a certificate and reloads it when its file changes.
type certReloader struct {
	certFile, keyFile string
	now               func() time.Time
	mu                sync.Mutex
	cert              *tls.Certificate
	modTime           time.Time
	checked           time.Time
}

func (r *certReloader) load() error {
	info, err := os.Stat(r.certFile)
	if err != nil {
		return fmt.Errorf("tls_cert: %w", err)
	}
	cert, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		return fmt.Errorf("tls_cert/tls_key: %w", err)
	}
	r.cert, r.modTime, r.checked = &cert, info.ModTime(), r.now()
	return nil
}

// get is tls.Config.GetCertificate: the current certificate, reloaded if
// the file changed; a reload that fails keeps the one that works.
func (r *certReloader) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now := r.now(); now.Sub(r.checked) >= CertCheckEvery {
		r.checked = now
		if info, err := os.Stat(r.certFile); err == nil && !info.ModTime().Equal(r.modTime) {
			_ = r.load()
		}
	}
	return r.cert, nil
}

// ClientTLS is the TLS configuration for requests to peers (and replicas
// served over HTTPS): the configured CA, else the system's roots.
func (c Config) ClientTLS() (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.TLSCA == "" {
		return tc, nil
	}
	pem, err := os.ReadFile(c.TLSCA)
	if err != nil {
		return nil, fmt.Errorf("tls_ca: %w", err)
	}
	tc.RootCAs = x509.NewCertPool()
	if !tc.RootCAs.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("tls_ca %s: no PEM certificate in it", c.TLSCA)
	}
	return tc, nil
}
