package limiter

import (
	"errors"
	"time"
)

// Waiting for a slot: a check that may wait (Within.Wait) books the first
// moment its cost fits, which check.lua records in the same run.

// MaxWait is the longest Within.Wait: a booking holds its room, and its
// caller, at most this far ahead.
const MaxWait = 30 * time.Second

// ErrWaitNotLog is returned for a check with Within.Wait on a policy of
// another algorithm than the log: only the log can record a request at a
// future moment.
var ErrWaitNotLog = errors.New("only a log policy can book a slot: wait needs algorithm log")

// ErrInvalidWait is returned for a Within.Wait below 0 or above MaxWait.
var ErrInvalidWait = errors.New("wait must be from 0 to 30s")

// ValidateWait reports the error AllowWithin gives a check that may wait
// (Within.Wait) under p, or nil: ErrInvalidWait below 0 or above MaxWait,
// ErrWaitNotLog for a wait on another algorithm than the log. A caller that
// validates its input before anything else (an HTTP handler naming each bad
// field) asks here rather than learning it from the call.
func ValidateWait(wait time.Duration, p Policy) error {
	_, err := bookingWait(wait, p)
	return err
}

// bookingWait is what a check's call carries for a wait under p: the wait
// in ms, or noBooking for none — no wait, less than a millisecond, or a
// shadow policy's (which never holds a request).
func bookingWait(wait time.Duration, p Policy) (int64, error) {
	switch {
	case wait < 0 || wait > MaxWait:
		return noBooking, ErrInvalidWait
	case wait == 0:
		return noBooking, nil
	case p.AlgorithmName() != Log:
		return noBooking, ErrWaitNotLog
	case p.Shadow || wait < time.Millisecond:
		return noBooking, nil
	}
	return wait.Milliseconds(), nil
}
