package modelserver

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha1"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Registry is a stand-in for the npm registry on 127.0.0.1 that serves
// one package, so that an agent's `npm install --registry URL NAME` works
// with no network: the package document (GET /NAME) and its tarball.
type Registry struct {
	Name, Version string
	tgz           []byte
	ln            net.Listener
	srv           *http.Server

	mu   sync.Mutex
	hits []string
}

// StartRegistry serves a package NAME@VERSION whose index.js is main.
func StartRegistry(name, version, main string) (*Registry, error) {
	tgz, err := npmTarball(name, version, main)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	r := &Registry{Name: name, Version: version, tgz: tgz, ln: ln}
	r.srv = &http.Server{Handler: r, ReadHeaderTimeout: time.Minute}
	go r.srv.Serve(ln)
	return r, nil
}

// URL is the registry's base URL.
func (r *Registry) URL() string { return "http://" + r.ln.Addr().String() + "/" }

// Close stops the registry.
func (r *Registry) Close() error { return r.srv.Close() }

// Hits are the paths requested, in order.
func (r *Registry) Hits() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.hits...)
}

func (r *Registry) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	r.hits = append(r.hits, req.Method+" "+req.URL.Path)
	r.mu.Unlock()
	file := fmt.Sprintf("%s-%s.tgz", r.Name, r.Version)
	switch strings.TrimPrefix(req.URL.Path, "/") {
	case r.Name:
		sum512 := sha512.Sum512(r.tgz)
		sum1 := sha1.Sum(r.tgz)
		doc := map[string]any{
			"name": r.Name, "dist-tags": map[string]string{"latest": r.Version},
			"versions": map[string]any{r.Version: map[string]any{
				"name": r.Name, "version": r.Version, "main": "index.js",
				"dist": map[string]any{
					"tarball":   r.URL() + r.Name + "/-/" + file,
					"shasum":    hex.EncodeToString(sum1[:]),
					"integrity": "sha512-" + base64.StdEncoding.EncodeToString(sum512[:]),
				},
			}},
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(doc)
	case r.Name + "/-/" + file:
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(r.tgz)
	default:
		http.NotFound(w, req)
	}
}

// npmTarball packs package/package.json and package/index.js as npm does.
func npmTarball(name, version, main string) ([]byte, error) {
	pkg, _ := json.Marshal(map[string]string{"name": name, "version": version, "main": "index.js", "license": "MIT"})
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, f := range []struct {
		name string
		data []byte
	}{{"package/package.json", pkg}, {"package/index.js", []byte(main)}} {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.data)), ModTime: time.Unix(0, 0), Typeflag: tar.TypeReg}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
