// Package journal is the record a chaos worker keeps of what its handlers did,
// one line per event in a file that several processes append to, and that the
// test driver reads after killing them.
//
// Each entry is one write(2) to a file opened with O_APPEND, so the lines of
// concurrent writers (goroutines or processes) never interleave, and a line
// written before a SIGKILL is in the file afterwards: the kernel holds it, not
// the process. Entries that must survive more than the process — a handler's
// completion, which the test treats as "the work was done" — are also synced
// to disk before Append returns.
package journal

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Kinds of entry the worker writes. Library events seen through its Observer
// are written with their EventKind name prefixed by "ev:" (ev:deleted,
// ev:released, ev:lease_lost, ...).
const (
	Start  = "start"  // the handler began
	Done   = "done"   // the handler's work is recorded as complete; it returns nil next
	Cancel = "cancel" // the handler saw its context cancelled; Detail is context.Cause
	Fail   = "fail"   // the handler returns an error it chose (a broken mode)
	Ready  = "ready"  // the process built its consumer and calls Run
	Exit   = "exit"   // Run returned; Detail is its error, "" for nil
)

// Entry is one line of the journal.
type Entry struct {
	Kind         string
	Time         time.Time
	PID          int
	MessageID    string // "-" for process entries
	ReceiveCount int
	Detail       string // free text without tabs or newlines
}

// Writer appends entries to a journal file. It is safe for concurrent use.
type Writer struct {
	mu sync.Mutex // serialises Sync with the writes it must cover
	f  *os.File
}

// Create opens path for appending, creating it if needed.
func Create(path string) (*Writer, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	return &Writer{f: f}, nil
}

// Append writes e as one line. With durable set it returns only after the
// line reached the disk (fsync).
func (w *Writer) Append(e Entry, durable bool) error {
	if e.MessageID == "" {
		e.MessageID = "-"
	}
	line := fmt.Sprintf("%s\t%d\t%d\t%s\t%d\t%s\n", e.Kind, e.Time.UnixNano(), e.PID, e.MessageID, e.ReceiveCount, clean(e.Detail))
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, err := w.f.WriteString(line); err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	if durable {
		if err := w.f.Sync(); err != nil {
			return fmt.Errorf("journal: sync: %w", err)
		}
	}
	return nil
}

// Close closes the file.
func (w *Writer) Close() error { return w.f.Close() }

func clean(s string) string {
	return strings.NewReplacer("\t", " ", "\n", " ", "\r", " ").Replace(s)
}

// Read returns every complete entry of the journal at path, in file order. A
// last line without its newline (a writer killed in the middle of a write) is
// ignored; any other malformed line is an error naming its number.
func Read(path string) ([]Entry, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	if i := bytes.LastIndexByte(b, '\n'); i < len(b)-1 {
		b = b[:i+1]
	}
	var out []Entry
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		e, err := parse(sc.Text())
		if err != nil {
			return nil, fmt.Errorf("journal %s line %d: %w", path, n, err)
		}
		out = append(out, e)
	}
	return out, sc.Err()
}

func parse(line string) (Entry, error) {
	f := strings.SplitN(line, "\t", 6)
	if len(f) != 6 {
		return Entry{}, fmt.Errorf("%d fields in %q, want 6", len(f), line)
	}
	ns, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return Entry{}, fmt.Errorf("time %q: %w", f[1], err)
	}
	pid, err := strconv.Atoi(f[2])
	if err != nil {
		return Entry{}, fmt.Errorf("pid %q: %w", f[2], err)
	}
	rc, err := strconv.Atoi(f[4])
	if err != nil {
		return Entry{}, fmt.Errorf("receive count %q: %w", f[4], err)
	}
	return Entry{Kind: f[0], Time: time.Unix(0, ns), PID: pid, MessageID: f[3], ReceiveCount: rc, Detail: f[5]}, nil
}
