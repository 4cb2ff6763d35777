package dlock

import (
	"errors"
	"strings"
)

// Errors returned by the client. Test them with errors.Is.
var (
	// ErrNotAcquired: the lock was not granted (TryAcquire on a held lock,
	// or a wait whose deadline passed; the latter also matches
	// context.DeadlineExceeded).
	ErrNotAcquired = errors.New("dlock: not acquired")
	// ErrLockLost is the cause of a Lock's Context when the hold is known to
	// be gone: a renewal was refused, or no renewal succeeded before the
	// lease could have ended on the server.
	ErrLockLost = errors.New("dlock: lock lost")
	// ErrReleased is the cause of a Lock's Context after Release.
	ErrReleased = errors.New("dlock: lock released")
	// ErrNotOwner: the server answered NOTOWNER (the hold is gone).
	ErrNotOwner = errors.New("dlock: NOTOWNER")
	// ErrDeadlock: the server answered DEADLOCK (a second upgrader).
	ErrDeadlock = errors.New("dlock: DEADLOCK")
	// ErrWrongType: the key holds another type.
	ErrWrongType = errors.New("dlock: WRONGTYPE")
	// ErrNotReplicated: fewer replicas than asked confirmed the grant with
	// WAIT; the client released the lock.
	ErrNotReplicated = errors.New("dlock: not replicated")
	// ErrCrossSlot: the keys of a multi-lock do not share a Cluster slot.
	ErrCrossSlot = errors.New("dlock: keys in different slots")
	// ErrLatchBroken: the latch disappeared (ttl, DEL) without opening.
	ErrLatchBroken = errors.New("dlock: latch vanished without opening")
	// ErrNotLeader: Resign without leadership.
	ErrNotLeader = errors.New("dlock: not the leader")
	// ErrUnsupported: the server lacks the command (an older module).
	ErrUnsupported = errors.New("dlock: command not supported by the server")
	// ErrInvalidArgument: a bad argument (owner "*", a lease, limit or
	// weight out of range, no key), refused before anything is sent.
	ErrInvalidArgument = errors.New("dlock: invalid argument")
)

// ServerError is an error reply of the server. It matches ErrNotOwner,
// ErrDeadlock, ErrWrongType or ErrUnsupported with errors.Is where its code
// says so.
type ServerError struct {
	Code    string // the first word: ERR, NOTOWNER, DEADLOCK, WRONGTYPE, READONLY ...
	Message string // the whole reply
}

func (e *ServerError) Error() string { return "dlock: server: " + e.Message }

// Is maps the reply's code onto the package's sentinel errors.
func (e *ServerError) Is(target error) bool {
	switch target {
	case ErrNotOwner:
		return e.Code == "NOTOWNER"
	case ErrDeadlock:
		return e.Code == "DEADLOCK"
	case ErrWrongType:
		return e.Code == "WRONGTYPE"
	case ErrUnsupported:
		return e.Code == "ERR" && strings.Contains(e.Message, "unknown command")
	}
	return false
}

// serverError turns a go-redis error reply into a *ServerError and leaves
// other errors (I/O, timeouts) as they are.
func serverError(err error) error {
	if err == nil {
		return nil
	}
	var re interface{ RedisError() }
	if !errors.As(err, &re) {
		return err
	}
	msg := err.Error()
	code := msg
	if i := strings.IndexByte(msg, ' '); i > 0 {
		code = msg[:i]
	}
	return &ServerError{Code: code, Message: msg}
}

// isServerError reports whether err is a reply of the server (the command
// ran, or was refused, and the connection is fine).
func isServerError(err error) bool {
	var se *ServerError
	return errors.As(err, &se)
}

// transient reports a refusal worth retrying until a deadline.
func transient(err error) bool {
	var se *ServerError
	if !errors.As(err, &se) {
		return true // I/O
	}
	switch se.Code {
	case "OOM", "READONLY", "LOADING", "BUSY", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN", "MOVED", "ASK":
		return true
	}
	return false
}
