"""A small exec credential provider plugin for tests, built with Go from the
source below (standard library only) into the kubelet-py cache.

It speaks credentialprovider.kubelet.k8s.io/v1 (or the version in
--api-version): it reads the CredentialProviderRequest on stdin and answers
with the credentials in $CREDPLUGIN_USER / $CREDPLUGIN_PASSWORD for the
image's registry host, with --cache-key-type and, when given,
--cache-duration. With --require-token it refuses a request without a
service-account token. Each request is appended as one JSON line to --log,
so a test sees how often the kubelet ran it and with what.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile

SOURCE = r"""
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

type request struct {
	APIVersion                string            `json:"apiVersion"`
	Kind                      string            `json:"kind"`
	Image                     string            `json:"image"`
	ServiceAccountToken       string            `json:"serviceAccountToken,omitempty"`
	ServiceAccountAnnotations map[string]string `json:"serviceAccountAnnotations,omitempty"`
}

type authConfig struct {
	Username string `json:"username"`
	Password string `json:"password"`
}

type response struct {
	APIVersion    string                `json:"apiVersion"`
	Kind          string                `json:"kind"`
	CacheKeyType  string                `json:"cacheKeyType"`
	CacheDuration string                `json:"cacheDuration,omitempty"`
	Auth          map[string]authConfig `json:"auth"`
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(1)
}

func main() {
	apiVersion := flag.String("api-version", "credentialprovider.kubelet.k8s.io/v1", "")
	cacheKeyType := flag.String("cache-key-type", "Registry", "")
	cacheDuration := flag.String("cache-duration", "", "")
	logPath := flag.String("log", "", "")
	requireToken := flag.Bool("require-token", false, "")
	flag.Parse()

	data, err := io.ReadAll(os.Stdin)
	if err != nil {
		fail("reading stdin: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	var req request
	if err := dec.Decode(&req); err != nil {
		fail("decoding request: %v", err)
	}
	if req.Kind != "CredentialProviderRequest" || req.APIVersion != *apiVersion {
		fail("unexpected request %s %s", req.APIVersion, req.Kind)
	}
	if *logPath != "" {
		f, err := os.OpenFile(*logPath, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			fail("opening log: %v", err)
		}
		line, _ := json.Marshal(req)
		f.Write(append(line, '\n'))
		f.Close()
	}
	if *requireToken && req.ServiceAccountToken == "" {
		fail("no service account token in the request")
	}
	host := strings.SplitN(req.Image, "/", 2)[0]
	resp := response{
		APIVersion:    *apiVersion,
		Kind:          "CredentialProviderResponse",
		CacheKeyType:  *cacheKeyType,
		CacheDuration: *cacheDuration,
		Auth: map[string]authConfig{
			host: {Username: os.Getenv("CREDPLUGIN_USER"), Password: os.Getenv("CREDPLUGIN_PASSWORD")},
		},
	}
	if err := json.NewEncoder(os.Stdout).Encode(resp); err != nil {
		fail("writing response: %v", err)
	}
}
"""


class Unavailable(Exception):
    """The plugin cannot be built here (no Go toolchain)."""


def _cache_dir() -> str:
    base = os.environ.get("KUBELET_CACHE", os.path.expanduser("~/.cache/kubelet-py"))
    return os.path.join(base, "credplugin")


def build() -> str:
    """The plugin binary (built once per source version); its path."""
    digest = hashlib.sha256(SOURCE.encode()).hexdigest()[:16]
    out = os.path.join(_cache_dir(), f"test-credential-provider-{digest}")
    if os.access(out, os.X_OK):
        return out
    go = shutil.which("go") or (
        "/usr/local/go/bin/go" if os.path.exists("/usr/local/go/bin/go") else None
    )
    if go is None:
        raise Unavailable("no Go toolchain to build the test credential provider")
    os.makedirs(_cache_dir(), exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="credplugin-") as src:
        with open(os.path.join(src, "main.go"), "w") as fh:
            fh.write(SOURCE)
        with open(os.path.join(src, "go.mod"), "w") as fh:
            fh.write("module credplugin\n\ngo 1.21\n")
        tmp_out = out + ".tmp"
        env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod", "GOTOOLCHAIN": "local"}
        res = subprocess.run(
            [go, "build", "-o", tmp_out, "."], cwd=src, env=env, capture_output=True, text=True,
            timeout=300,
        )  # fmt: skip
        if res.returncode != 0:
            raise Unavailable(f"go build failed: {res.stderr[-2000:]}")
        os.replace(tmp_out, out)
    return out


def install(bin_dir: str, name: str) -> str:
    """The plugin in bin_dir under the provider name the config gives it."""
    os.makedirs(bin_dir, exist_ok=True)
    dest = os.path.join(bin_dir, name)
    shutil.copy2(build(), dest)
    os.chmod(dest, 0o755)
    return dest
