package overhead

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Target is a gateway under test: a process of its own in front of the
// upstream (or the upstream itself, "direct").
type Target struct {
	Name string
	URL  string
	PID  int // 0 for direct: no process of its own
	// Admin is SkyWalker's admin listener (/debug/pprof), when profiled.
	Admin string
	cmd   *exec.Cmd
}

// Stop ends the target's process and everything it started (its process
// group), and waits for it.
func (t *Target) Stop() {
	if t.cmd == nil || t.cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-t.cmd.Process.Pid, syscall.SIGKILL)
	_ = t.cmd.Wait()
}

// freeAddr is a free loopback address.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// pinnedArgs is argv run on core (taskset), or as it is when core < 0.
func pinnedArgs(core int, argv ...string) []string {
	if core >= 0 {
		return append([]string{"taskset", "-c", strconv.Itoa(core)}, argv...)
	}
	return argv
}

// pinned is a command for argv on core, in a process group of its own.
func pinned(core int, argv ...string) *exec.Cmd {
	argv = pinnedArgs(core, argv...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL} // stopped with us, whatever happens
	return cmd
}

// start runs cmd and waits until ready answers true (or 20 s pass).
func start(name, url string, cmd *exec.Cmd, logPath string, ready func() bool) (*Target, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	// taskset execs the program: the PID is the gateway's own.
	t := &Target{Name: name, URL: url, PID: cmd.Process.Pid, cmd: cmd}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if ready() {
			return t, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Stop()
	out, _ := os.ReadFile(logPath)
	return nil, fmt.Errorf("%s did not start within 20 s; its log (%s): %s", name, logPath, strings.TrimSpace(string(out)))
}

func dialable(addr string) func() bool {
	return func() bool {
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err == nil {
			c.Close()
		}
		return err == nil
	}
}

// StartNginx runs nginx as a reverse proxy to upstream: one process (no
// master), keep-alive upstream connections, streaming unbuffered.
func StartNginx(dir, upstream string, core int) (*Target, error) {
	bin, err := exec.LookPath("nginx")
	if err != nil {
		return nil, err
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	conf := fmt.Sprintf(`daemon off;
master_process off;
worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[1]s/nginx-error.log;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path %[1]s/body;
  proxy_temp_path %[1]s/proxy;
  client_max_body_size 32m;
  client_body_buffer_size 1m;
  upstream backend { server %[2]s; keepalive 64; }
  server {
    listen %[3]s;
    location / {
      proxy_pass http://backend;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }
  }
}
`, dir, strings.TrimPrefix(upstream, "http://"), addr)
	path := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	return start("nginx", "http://"+addr, pinned(core, bin, "-c", path, "-p", dir), filepath.Join(dir, "nginx.log"), dialable(addr))
}

// StartHAProxy runs HAProxy as a reverse proxy to upstream: one thread,
// keep-alive to the upstream (http-reuse always).
func StartHAProxy(dir, upstream string, core int) (*Target, error) {
	bin, err := exec.LookPath("haproxy")
	if err != nil {
		return nil, err
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	conf := fmt.Sprintf(`global
  nbthread 1
  maxconn 4096
defaults
  mode http
  timeout connect 5s
  timeout client 60s
  timeout server 60s
  http-reuse always
frontend fe
  bind %s
  default_backend be
backend be
  server up %s
`, addr, strings.TrimPrefix(upstream, "http://"))
	path := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	return start("haproxy", "http://"+addr, pinned(core, bin, "-db", "-f", path), filepath.Join(dir, "haproxy.log"), dialable(addr))
}

// StartSkyWalker runs `skywalker serve` (the binary at exe) as one region
// in front of upstream: no peers, warnings only, its admin listener
// (/debug/pprof) on only when admin.
func StartSkyWalker(ctx context.Context, dir, exe, upstream string, core int, admin bool) (*Target, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	adminAddr := "off"
	if admin {
		if adminAddr, err = freeAddr(); err != nil {
			return nil, err
		}
	}
	cmd := pinned(core, exe, "serve", "--log-level", "warn")
	cmd.Env = append(os.Environ(), "REGION_ID=bench", "LOCAL_WORKER_POOL="+upstream, "SKYWALKER_LISTEN="+addr,
		"SKYWALKER_ADMIN_LISTEN="+adminAddr, "SKYWALKER_MAX_IN_FLIGHT=100000")
	ready := func() bool {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/ready", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	t, err := start("skywalker", "http://"+addr, cmd, filepath.Join(dir, "skywalker.log"), ready)
	if err != nil && errors.Is(ctx.Err(), context.Canceled) {
		return nil, ctx.Err()
	}
	if t != nil && admin {
		t.Admin = "http://" + adminAddr
	}
	return t, err
}
