package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
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
	"github.com/ratescope/ratescope/server/conffile"
	"github.com/ratescope/ratescope/server/envoyconf"
)

// When a reload reads the files. An editor's save is a burst of events
// (write a temp file, rename it over, chmod) and a file written in place may
// be read half-written, so the watcher waits reloadQuiet after the last
// event, and every reload (SIGHUP too) applies the files only once they read
// the same twice reloadStable apart — giving up on files that still change
// after reloadSettleMax. Watched folders are checked every rewatchEvery: one
// moved away and made anew is watched again.
const (
	reloadQuiet     = 100 * time.Millisecond
	reloadStable    = 100 * time.Millisecond
	reloadSettleMax = 5 * time.Second
	rewatchEvery    = 500 * time.Millisecond
)

// configStore holds the settings in force. Everything that looks a policy,
// a route or a trusted proxy up loads them through it, once per request; a
// reload swaps in a new value, whole and valid, or changes nothing.
type configStore struct {
	cur     atomic.Pointer[settings]
	cfg     Config // flags and environment: they do not change at runtime
	metrics *metrics
	log     *slog.Logger
	// onChange, when set, is told the names of the policies a reload changed
	// or removed, all at once, so caches built on the old definitions drop
	// them.
	onChange func(policies ...string)

	mu       sync.Mutex // one reload at a time
	lastRead string     // what the files held when last read (inputs.digest): in force, or refused
}

// newConfigStore loads the settings at start-up; an invalid file stops it.
func newConfigStore(cfg Config, m *metrics, log *slog.Logger) (*configStore, error) {
	s := &configStore{cfg: cfg, metrics: m, log: log}
	in, err := s.gather()
	if err != nil {
		return nil, fmt.Errorf("invalid configuration: %w", err)
	}
	set, err := s.build(in)
	if err != nil {
		return nil, fmt.Errorf("invalid configuration: %w", err)
	}
	s.cur.Store(set)
	s.lastRead = in.digest()
	s.logWarnings(set)
	m.configLoaded(true, set.loadedAt)
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

// inputs are the files a config is built from, as read at one moment.
type inputs struct {
	config []byte           // the config file; nil: none
	envoy  []envoyconf.File // envoyproxy/ratelimit's files; nil: no folder
}

// digest identifies the inputs: equal inputs, equal digests.
func (in inputs) digest() string {
	sum := sha256.Sum256(in.config)
	return hex.EncodeToString(sum[:]) + envoyconf.Digest(in.envoy)
}

// gather reads the config file and the envoy folder as they are now. Only
// regular files of at most conffile.MaxSize bytes are read; anything else is
// an error naming it, never a read that blocks (a named pipe) or does not
// end (a link to /dev/zero).
func (s *configStore) gather() (inputs, error) {
	var in inputs
	if s.cfg.ConfigFile != "" {
		b, err := conffile.Read(s.cfg.ConfigFile)
		if err != nil {
			return in, fmt.Errorf("failed to read the config file %s: %w", s.cfg.ConfigFile, err)
		}
		in.config = b
	}
	if s.cfg.EnvoyConfigDir != "" {
		files, err := envoyconf.ReadDir(s.cfg.EnvoyConfigDir)
		if err != nil {
			return in, err
		}
		in.envoy = files
	}
	return in, nil
}

// build makes settings of the flags and in.
func (s *configStore) build(in inputs) (*settings, error) {
	var file *parsedFile
	if s.cfg.ConfigFile != "" {
		var err error
		if file, err = parseFile(in.config); err != nil {
			return nil, fmt.Errorf("%s: %w", s.cfg.ConfigFile, err)
		}
	}
	var envoyFiles *envoyconf.Set
	if s.cfg.EnvoyConfigDir != "" {
		var err error
		if envoyFiles, err = envoyconf.Parse(in.envoy, envoyconf.Options{Compat: s.cfg.EnvoyCompat}); err != nil {
			return nil, err
		}
	}
	set, err := buildSettings(s.cfg, file, envoyFiles, s.metrics, time.Now())
	if err != nil {
		if s.cfg.ConfigFile != "" {
			err = fmt.Errorf("%s: %w", s.cfg.ConfigFile, err)
		}
		return nil, err
	}
	return set, nil
}

// logWarnings logs what loading envoyproxy/ratelimit's files decided that
// they did not say.
func (s *configStore) logWarnings(set *settings) {
	if set.envoyFiles == nil {
		return
	}
	for _, w := range set.envoyFiles.Warnings() {
		s.log.Warn(w)
	}
}

// settled gathers the inputs once two reads reloadStable apart agree: a file
// still being written is not read half-way. Files that keep changing for
// reloadSettleMax are taken as last read (and refused unless they are
// valid); an error that persists is returned.
func (s *configStore) settled(ctx context.Context) (inputs, error) {
	in, err := s.gather()
	deadline := time.Now().Add(reloadSettleMax)
	for {
		t := time.NewTimer(reloadStable)
		select {
		case <-ctx.Done():
			t.Stop()
			return in, ctx.Err()
		case <-t.C:
		}
		again, errAgain := s.gather()
		switch {
		case err == nil && errAgain == nil && again.digest() == in.digest(),
			err != nil && errAgain != nil,
			time.Now().After(deadline):
			return again, errAgain
		}
		in, err = again, errAgain
	}
}

// reload re-reads the config file and the envoy folder, once they have
// settled, and applies them when they are valid. With onlyChanged (the file
// watcher), content equal to what was last read — in force, or refused
// already — is no reload at all: a folder sees events for other files too
// (the server's own log, perhaps), and an invalid file is refused once, not
// at every event.
func (s *configStore) reload(ctx context.Context, reason string, onlyChanged bool) error {
	if s.cfg.ConfigFile == "" && s.cfg.EnvoyConfigDir == "" {
		s.log.Info("no config file to reload", "reason", reason)
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	in, err := s.settled(ctx)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err == nil && onlyChanged && in.digest() == s.lastRead {
		return nil
	}
	var set *settings
	if err == nil {
		s.lastRead = in.digest()
		set, err = s.build(in)
	}
	if err != nil {
		s.metrics.configReloads.WithLabelValues("error").Inc()
		s.metrics.configLoaded(false, time.Time{})
		s.log.Error("config reload refused; the running config stays", "reason", reason,
			"version", s.load().version, "err", err)
		return err
	}
	old := s.load()
	s.cur.Store(set)
	if s.onChange != nil {
		var changed []string
		for _, p := range old.policies {
			if np, ok := set.policy(p.Policy.Policy.Name); !ok || np.Policy.Policy.String() != p.Policy.Policy.String() {
				changed = append(changed, p.Policy.Policy.Name)
			}
		}
		s.onChange(changed...)
	}
	s.metrics.configReloads.WithLabelValues("ok").Inc()
	s.metrics.configLoaded(true, set.loadedAt)
	s.log.Info("config reloaded", "reason", reason, "version", set.version, "previous", old.version,
		"policies", len(set.policies), "routes", len(set.routes))
	s.logWarnings(set)
	return nil
}

// watcher reloads the config on SIGHUP and whenever a watched folder — the
// config file's, the envoy folder — changes. It watches the folders, not the
// files: editors and config managers replace a file by renaming another over
// it, which a watch on the file itself would not survive. A folder moved away
// and made anew is watched again (rewatch). When a folder cannot be watched,
// SIGHUP still works.
type watcher struct {
	store *configStore
	hup   chan os.Signal
	fs    *fsnotify.Watcher // nil: no file, or it cannot be watched
	// dirs are the watched folders and what each was when its watch was
	// added (nil: it could not be watched since).
	dirs map[string]os.FileInfo
}

// watch starts listening for SIGHUP and for changes now, so none made after
// it returns is missed; run acts on them.
func (s *configStore) watch() *watcher {
	w := &watcher{store: s, hup: make(chan os.Signal, 1), dirs: map[string]os.FileInfo{}}
	signal.Notify(w.hup, syscall.SIGHUP)
	if s.cfg.ConfigFile != "" {
		w.dirs[filepath.Dir(s.cfg.ConfigFile)] = nil
	}
	if s.cfg.EnvoyConfigDir != "" {
		w.dirs[filepath.Clean(s.cfg.EnvoyConfigDir)] = nil
	}
	if len(w.dirs) == 0 {
		return w
	}
	fw, err := fsnotify.NewWatcher()
	if err == nil {
		w.fs = fw
		for d := range w.dirs {
			if err = w.add(d); err != nil {
				break
			}
		}
	}
	if err != nil {
		if w.fs != nil {
			w.fs.Close()
			w.fs = nil
		}
		s.log.Warn("config file changes will not be noticed; send SIGHUP to reload", "err", err)
	}
	return w
}

// add watches folder d and remembers which folder that is.
func (w *watcher) add(d string) error {
	fi, err := os.Stat(d)
	if err == nil {
		err = w.fs.Add(d)
	}
	if err != nil {
		w.dirs[d] = nil
		return fmt.Errorf("failed to watch %s: %w", d, err)
	}
	w.dirs[d] = fi
	return nil
}

// rewatch watches again each folder that is no longer the one its watch
// follows — moved away (the watch went with it) and made anew, or gone and
// back — and reports whether it did: what the new folder holds is news.
func (w *watcher) rewatch() bool {
	renewed := false
	for d, was := range w.dirs {
		now, err := os.Stat(d)
		if err != nil || (was != nil && os.SameFile(was, now)) {
			continue
		}
		if was != nil {
			_ = w.fs.Remove(d) // the watch may have gone with the folder
		}
		if err := w.add(d); err != nil {
			w.store.log.Warn("config folder made anew but not watched", "err", err)
			continue
		}
		w.store.log.Info("config folder made anew; watching it again", "dir", d)
		renewed = true
	}
	return renewed
}

// run reloads on each SIGHUP and after each burst of changes, until ctx ends.
func (w *watcher) run(ctx context.Context) {
	defer signal.Stop(w.hup)
	var events chan fsnotify.Event
	var errs chan error
	var rewatch <-chan time.Time
	if w.fs != nil {
		defer w.fs.Close()
		events, errs = w.fs.Events, w.fs.Errors
		t := time.NewTicker(rewatchEvery)
		defer t.Stop()
		rewatch = t.C
	}
	debounce := time.NewTimer(time.Hour)
	debounce.Stop()
	defer debounce.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.hup:
			_ = w.store.reload(ctx, "SIGHUP", false)
		case e := <-events:
			if w.concerns(e) {
				debounce.Reset(reloadQuiet)
			}
		case <-rewatch:
			if w.rewatch() {
				debounce.Reset(reloadQuiet)
			}
		case <-debounce.C:
			_ = w.store.reload(ctx, "file changed", true)
		case err := <-errs:
			w.store.log.Warn("config file watcher failed", "err", err)
		}
	}
}

// concerns reports whether an event in a watched folder may have changed the
// config: any in the envoy folder; one about the config file's own name or,
// when the file is a symbolic link (a Kubernetes ConfigMap swaps a ..data
// link beside it), any event in its folder.
func (w *watcher) concerns(e fsnotify.Event) bool {
	if d := w.store.cfg.EnvoyConfigDir; d != "" && filepath.Clean(filepath.Dir(e.Name)) == filepath.Clean(d) {
		return true
	}
	path := w.store.cfg.ConfigFile
	if path == "" {
		return false
	}
	if filepath.Base(e.Name) == filepath.Base(path) {
		return true
	}
	fi, err := os.Lstat(path)
	return err == nil && fi.Mode()&os.ModeSymlink != 0
}

// policies lists the policies in force, in order: what the overview counts
// and shows.
func (s *configStore) policies() []limiter.Policy {
	ps := s.load().policies
	out := make([]limiter.Policy, len(ps))
	for i, p := range ps {
		out[i] = p.Policy.Policy
	}
	return out
}
