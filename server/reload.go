package server

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/limiter/httplimit"
)

// reloadDebounce is how long the watcher waits after the last change to the
// config file's folder before it reads the file: an editor's save is a burst
// of events (write a temp file, rename it over, chmod), and a file written in
// place may be read half-written otherwise.
const reloadDebounce = 150 * time.Millisecond

// configStore holds the settings in force. Everything that looks a policy,
// a route or a trusted proxy up loads them through it, once per request; a
// reload swaps in a new value, whole and valid, or changes nothing.
type configStore struct {
	cur     atomic.Pointer[settings]
	cfg     Config // flags and environment: they do not change at runtime
	metrics *metrics
	log     *slog.Logger
	// onChange, when set, is told the name of each policy a reload changed or
	// removed, so caches built on the old definition drop it.
	onChange func(policy string)

	mu       sync.Mutex // one reload at a time
	lastRead []byte     // the file content last read: in force, or refused
}

// newConfigStore loads the settings at start-up; an invalid file stops it.
func newConfigStore(cfg Config, m *metrics, log *slog.Logger) (*configStore, error) {
	s := &configStore{cfg: cfg, metrics: m, log: log}
	set, raw, err := s.read()
	if err != nil {
		return nil, fmt.Errorf("invalid configuration: %w", err)
	}
	s.cur.Store(set)
	s.lastRead = raw
	return s, nil
}

// load is the settings in force. Load once per request and use that value.
func (s *configStore) load() *settings { return s.cur.Load() }

// lookup finds a policy in force by name: what the live view looks
// policies up with.
func (s *configStore) lookup(name string) (limiter.Policy, bool) {
	p, ok := s.load().policy(name)
	if !ok {
		return limiter.Policy{}, false
	}
	return p.Policy.Policy, true
}

// policy finds a policy in force by name, prepared for answers and
// observed by its counters: what the Envoy service looks policies up with.
func (s *configStore) policy(name string) (*httplimit.Policy, bool) {
	p, ok := s.load().policy(name)
	if !ok {
		return nil, false
	}
	return p.Policy, true
}

// read builds settings from the flags and the file as it is now.
func (s *configStore) read() (*settings, []byte, error) {
	var file *parsedFile
	var raw []byte
	if s.cfg.ConfigFile != "" {
		b, err := os.ReadFile(s.cfg.ConfigFile)
		if err != nil {
			return nil, nil, fmt.Errorf("failed to read the config file: %w", err)
		}
		raw = b
		if file, err = parseFile(b); err != nil {
			return nil, raw, fmt.Errorf("%s: %w", s.cfg.ConfigFile, err)
		}
	}
	set, err := buildSettings(s.cfg, file, s.metrics, time.Now())
	if err != nil {
		if s.cfg.ConfigFile != "" {
			err = fmt.Errorf("%s: %w", s.cfg.ConfigFile, err)
		}
		return nil, raw, err
	}
	return set, raw, nil
}

// reload re-reads the config file and applies it when it is valid. With
// onlyChanged (the file watcher), content equal to what was last read — in
// force, or refused already — is no reload at all: a folder sees events for
// other files too (the server's own log, perhaps), and an invalid file is
// refused once, not at every event.
func (s *configStore) reload(reason string, onlyChanged bool) error {
	if s.cfg.ConfigFile == "" {
		s.log.Info("no config file to reload", "reason", reason)
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if onlyChanged {
		if b, err := os.ReadFile(s.cfg.ConfigFile); err == nil && bytes.Equal(b, s.lastRead) {
			return nil
		}
	}
	set, raw, err := s.read()
	if raw != nil {
		s.lastRead = raw
	}
	if err != nil {
		s.metrics.configReloads.WithLabelValues("error").Inc()
		s.log.Error("config reload refused; the running config stays", "reason", reason,
			"version", s.load().version, "err", err)
		return err
	}
	old := s.load()
	s.cur.Store(set)
	if s.onChange != nil {
		for _, p := range old.policies {
			if np, ok := set.policy(p.Policy.Policy.Name); !ok || np.Policy.Policy.String() != p.Policy.Policy.String() {
				s.onChange(p.Policy.Policy.Name)
			}
		}
	}
	s.metrics.configReloads.WithLabelValues("ok").Inc()
	s.log.Info("config reloaded", "reason", reason, "version", set.version, "previous", old.version,
		"policies", len(set.policies), "routes", len(set.routes))
	return nil
}

// watcher reloads the config on SIGHUP and whenever the config file's folder
// changes. It watches the folder, not the file: editors and config managers
// replace a file by renaming another over it, which a watch on the file
// itself would not survive. When the folder cannot be watched, SIGHUP still
// works.
type watcher struct {
	store *configStore
	hup   chan os.Signal
	fs    *fsnotify.Watcher // nil: no file, or it cannot be watched
}

// watch starts listening for SIGHUP and for changes now, so none made after
// it returns is missed; run acts on them.
func (s *configStore) watch() *watcher {
	w := &watcher{store: s, hup: make(chan os.Signal, 1)}
	signal.Notify(w.hup, syscall.SIGHUP)
	if s.cfg.ConfigFile == "" {
		return w
	}
	fw, err := fsnotify.NewWatcher()
	if err == nil {
		if err = fw.Add(filepath.Dir(s.cfg.ConfigFile)); err != nil {
			fw.Close()
		}
	}
	if err != nil {
		s.log.Warn("config file changes will not be noticed; send SIGHUP to reload", "err", err)
		return w
	}
	w.fs = fw
	return w
}

// run reloads on each SIGHUP and after each burst of changes, until ctx ends.
func (w *watcher) run(ctx context.Context) {
	defer signal.Stop(w.hup)
	var events chan fsnotify.Event
	var errs chan error
	if w.fs != nil {
		defer w.fs.Close()
		events, errs = w.fs.Events, w.fs.Errors
	}
	debounce := time.NewTimer(time.Hour)
	debounce.Stop()
	defer debounce.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.hup:
			_ = w.store.reload("SIGHUP", false)
		case e := <-events:
			if w.concerns(e) {
				debounce.Reset(reloadDebounce)
			}
		case <-debounce.C:
			_ = w.store.reload("file changed", true)
		case err := <-errs:
			w.store.log.Warn("config file watcher failed", "err", err)
		}
	}
}

// concerns reports whether an event in the folder may have changed the config
// file: one about the file's own name or, when the file is a symbolic link
// (a Kubernetes ConfigMap swaps a ..data link beside it), any event.
func (w *watcher) concerns(e fsnotify.Event) bool {
	path := w.store.cfg.ConfigFile
	if filepath.Base(e.Name) == filepath.Base(path) {
		return true
	}
	fi, err := os.Lstat(path)
	return err == nil && fi.Mode()&os.ModeSymlink != 0
}
