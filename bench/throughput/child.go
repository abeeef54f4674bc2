package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqskit/sqsconsumer/sqstest"
)

// serverEnv, set in a process's environment to the JSON of serverOptions,
// makes the program (or the test binary, see TestMain) serve as the server
// side of a parent bench instead of benchmarking.
const serverEnv = "SQSCONSUMER_THROUGHPUT_SERVER"

// serverPlacement is where the server side runs.
type serverPlacement string

const (
	// placeChild runs it in a child process: the bench process's CPU time
	// is then the client's alone, as in a worker talking to SQS, and the
	// server's garbage does not run the client's GC.
	placeChild serverPlacement = "child"
	// placeInProcess runs it in the bench process: CPU figures include the
	// server's (and its TLS), and both share one heap and GC.
	placeInProcess serverPlacement = "inprocess"
)

// serveChild is the whole life of a child server side: it starts, writes
// its URLs as one JSON line to stdout, and serves until stdin reaches EOF
// (the parent closed it, or exited). It returns the process's exit code.
func serveChild(optsJSON string, stdin io.Reader, stdout io.Writer, stderr io.Writer) int {
	var opts serverOptions
	if err := json.Unmarshal([]byte(optsJSON), &opts); err != nil {
		fmt.Fprintf(stderr, "throughput server: %s=%q: %v\n", serverEnv, optsJSON, err)
		return 2
	}
	s, err := newServerSide(opts)
	if err != nil {
		fmt.Fprintln(stderr, "throughput server:", err)
		return 1
	}
	defer s.close()
	line, err := json.Marshal(s.urls)
	if err != nil {
		fmt.Fprintln(stderr, "throughput server:", err)
		return 1
	}
	if _, err := fmt.Fprintf(stdout, "%s\n", line); err != nil {
		return 1
	}
	_, _ = io.Copy(io.Discard, stdin)
	return 0
}

// serverConn is the bench's handle on its server side, wherever it runs.
type serverConn struct {
	opts  serverOptions
	place serverPlacement
	urls  serverURLs
	roots *x509.CertPool // trusts the measured listener's certificate; nil over plain HTTP
	// control reaches the control listener: plain HTTP, its own pool.
	controlTr *http.Transport
	control   *http.Client
	// filler is an SQS client on the control listener (no RTT, not
	// counted), for inspecting and deleting queues.
	filler *sqs.Client
	stop   func() error
}

// startServer starts the server side described by opts at place.
func startServer(opts serverOptions, place serverPlacement) (*serverConn, error) {
	var (
		urls serverURLs
		stop func() error
	)
	switch place {
	case placeInProcess:
		s, err := newServerSide(opts)
		if err != nil {
			return nil, err
		}
		urls, stop = s.urls, func() error { s.close(); return nil }
	case placeChild:
		var err error
		urls, stop, err = startChild(opts)
		if err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("server placement %q: want child or inprocess", place)
	}
	c := &serverConn{opts: opts, place: place, urls: urls, stop: stop}
	if opts.Proto.tls() {
		c.roots = x509.NewCertPool()
		if !c.roots.AppendCertsFromPEM([]byte(urls.CertPEM)) {
			_ = stop()
			return nil, errors.New("the server side sent no usable certificate")
		}
	}
	c.controlTr = http.DefaultTransport.(*http.Transport).Clone()
	c.controlTr.MaxIdleConnsPerHost = 16
	c.control = &http.Client{Transport: c.controlTr, Timeout: time.Minute}
	c.filler = newSQSClient(urls.Control, &http.Client{Transport: sqstest.RebufferingTransport(c.controlTr)})
	return c, nil
}

// startChild runs this program again as a server side (see serverEnv) and
// reads its URLs. stop closes the child's stdin and waits for it to exit
// (killing it after 10 s).
func startChild(opts serverOptions) (serverURLs, func() error, error) {
	exe, err := os.Executable()
	if err != nil {
		return serverURLs{}, nil, fmt.Errorf("finding this program to run the server side: %w", err)
	}
	optsJSON, err := json.Marshal(opts)
	if err != nil {
		return serverURLs{}, nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), serverEnv+"="+string(optsJSON))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return serverURLs{}, nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return serverURLs{}, nil, err
	}
	if err := cmd.Start(); err != nil {
		return serverURLs{}, nil, fmt.Errorf("starting the server side: %w", err)
	}
	exited := make(chan error, 1)
	stop := func() error {
		_ = stdin.Close()
		select {
		case err := <-exited:
			return err
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			return errors.New("the server side did not exit within 10 s of its stdin closing; killed")
		}
	}
	type lineOrErr struct {
		urls serverURLs
		err  error
	}
	first := make(chan lineOrErr, 1)
	go func() {
		line, err := bufio.NewReader(stdout).ReadBytes('\n')
		var u serverURLs
		if err == nil {
			err = json.Unmarshal(line, &u)
		}
		first <- lineOrErr{u, err}
		// cmd.Wait closes stdout: read it only before, then wait here so
		// the child is reaped (and stop can see it).
		_, _ = io.Copy(io.Discard, stdout)
		exited <- cmd.Wait()
	}()
	select {
	case l := <-first:
		if l.err != nil {
			_ = stop()
			return serverURLs{}, nil, fmt.Errorf("reading the server side's address: %w", l.err)
		}
		return l.urls, stop, nil
	case <-time.After(30 * time.Second):
		_ = stop()
		return serverURLs{}, nil, errors.New("the server side did not start within 30 s")
	}
}

// close stops the server side.
func (c *serverConn) close() error {
	c.controlTr.CloseIdleConnections()
	return c.stop()
}

// where describes the server side for report headers.
func (c *serverConn) where() string {
	backend := "sqstest"
	if c.opts.Endpoint != "" {
		backend = "a proxy to " + c.opts.Endpoint
	}
	switch c.place {
	case placeChild:
		return backend + " in a child process (CPU figures are the bench process's: the client's alone)"
	default:
		return backend + " in this process (CPU figures include the server's)"
	}
}

// call makes one control call and decodes its JSON answer into out (nil:
// none expected).
func (c *serverConn) call(ctx context.Context, method, path string, body, out any) error {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.urls.Control+path, r)
	if err != nil {
		return err
	}
	resp, err := c.control.Do(req)
	if err != nil {
		return fmt.Errorf("server side, %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("server side, %s %s: %w", method, path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("server side, %s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(b))
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("server side, %s %s: %w", method, path, err)
	}
	return nil
}

// fresh starts a measurement: a new sqstest server, every measured
// connection closed, the RTT set.
func (c *serverConn) fresh(ctx context.Context, rtt time.Duration) error {
	if err := c.call(ctx, http.MethodPost, "/_bench/fresh", nil, nil); err != nil {
		return err
	}
	return c.call(ctx, http.MethodPost, "/_bench/rtt?d="+url.QueryEscape(strconv.FormatInt(rtt.Nanoseconds(), 10)+"ns"), nil, nil)
}

// createQueue makes a queue holding n messages and returns its URL.
func (c *serverConn) createQueue(ctx context.Context, name string, n int, attrs map[string]string) (string, error) {
	var out struct {
		URL string `json:"url"`
	}
	err := c.call(ctx, http.MethodPost, "/_bench/queue", queueRequest{Name: name, Messages: n, Attrs: attrs}, &out)
	return out.URL, err
}

// reset starts a new counting window.
func (c *serverConn) reset(ctx context.Context) error {
	return c.call(ctx, http.MethodPost, "/_bench/reset", nil, nil)
}

// stats reads the counters.
func (c *serverConn) stats(ctx context.Context) (serverStats, error) {
	var s serverStats
	err := c.call(ctx, http.MethodGet, "/_bench/stats", nil, &s)
	return s, err
}
