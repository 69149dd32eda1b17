package wire

import (
	"context"
	"errors"
	"log/slog"

	"github.com/locking-center/locking-center/client/protocol"
	"github.com/locking-center/locking-center/locker"
)

// Result is what became of a request, as an Observer counts it.
type Result uint8

// The results, beside the answer bytes' meanings.
const (
	ResultOK      Result = iota // answered '+'
	ResultFail                  // answered '-': not held, reset, not durable
	ResultLocked                // answered '#'
	ResultInvalid               // answered '-' to a malformed frame
	ResultHangUp                // the client left while waiting; no answer
	// Results is how many results there are: an Observer may index an
	// array by Result.
	Results
)

var resultNames = [Results]string{"ok", "fail", "locked", "invalid", "hangup"}

// String returns the result's metric label: ok, fail, locked, invalid or
// hangup.
func (r Result) String() string {
	if r < Results {
		return resultNames[r]
	}
	return "unknown"
}

// resultOf is the Result of an answer byte.
func resultOf(answer byte) Result {
	switch answer {
	case protocol.AnswerOK:
		return ResultOK
	case protocol.AnswerLocked:
		return ResultLocked
	}
	return ResultFail
}

// command is one request of the four actions that v1 and sessions carry
// out alike: TryLock, Unlock, ResetByKey and ResetBySource. (A Lock
// differs: a v1 Lock waits in its connection's goroutine, a session's is
// a callback.) Both protocols decode their frames into a command and
// answer what execute returns, so an action means the same, logs the same
// lines and counts the same way whichever protocol carried it.
type command struct {
	action protocol.Action
	// key is the key; for ResetBySource, the source to reset.
	key string
	// holder asks for a TryLock; Remote names the peer in the log lines.
	holder locker.Holder
	// link is the session that sent it; nil for v1, which has no owners
	// (its Unlock releases whoever holds the key).
	link *locker.Link
	// id is a session request's id: a TryLock's, for Reissue.
	id uint32
	// token names the grant a session's Unlock releases (0: any of its own).
	token uint64
}

// outcome is what a command did: its answer, the token that answer
// carries (a grant's, or the released grant's), and whether it made a
// grant (one that must be handed on if its answer is never delivered).
type outcome struct {
	answer  byte
	token   uint64
	granted bool
	// drop: answer nothing and close the connection — the outcome is not
	// known (it may still take effect), or the answer could not be
	// confirmed as current (SPEC §8.5, §8.1).
	drop bool
}

// confirm reports whether an answer that changes nothing may be sent:
// Server.Confirm (a cluster leader's VerifyLeader round) said this node
// still leads. False means the connection is closed without an answer.
func (s *Server) confirm(cmd command) bool {
	if s.Confirm == nil {
		return true
	}
	if err := s.Confirm(); err != nil {
		s.Logger.Warn("answer not confirmed: connection closed without it", "peer", cmd.holder.Remote,
			"action", cmd.action.String(), "key", cmd.key, "err", err)
		return false
	}
	return true
}

// execute carries out cmd, logs what an operator needs to know of it, and
// returns its outcome. It does not count it: the caller counts the
// answer it gives, once given.
func (s *Server) execute(cmd command) outcome {
	switch cmd.action {
	case protocol.TryLock:
		var token uint64
		var err error
		if cmd.link != nil {
			token, err = cmd.link.TryLock(cmd.key, cmd.id)
		} else {
			token, err = s.Table.TryLock(cmd.key, cmd.holder)
		}
		switch {
		case err == nil:
			return outcome{answer: protocol.AnswerOK, token: token, granted: true}
		case errors.Is(err, locker.ErrLocked):
			if !s.confirm(cmd) {
				return outcome{drop: true}
			}
			return outcome{answer: protocol.AnswerLocked}
		}
		return s.refused(cmd, err)
	case protocol.Unlock:
		var token uint64
		var err error
		if cmd.link != nil {
			token, err = cmd.link.Unlock(cmd.key, cmd.token)
		} else {
			token, err = s.Table.Unlock(cmd.key)
		}
		if errors.Is(err, locker.ErrNotHeld) && !s.confirm(cmd) {
			return outcome{drop: true}
		}
		if err != nil {
			return s.refused(cmd, err)
		}
		if cmd.link == nil {
			token = 0 // a v1 answer is one byte
		}
		return outcome{answer: protocol.AnswerOK, token: token}
	case protocol.ResetByKey:
		res, err := s.Table.ResetByKey(cmd.key)
		if err != nil {
			return s.refused(cmd, err)
		}
		if res.Released == 0 && res.Refused == 0 && !s.confirm(cmd) {
			return outcome{drop: true}
		}
		s.Logger.Info("reset by key", "key", cmd.key, "peer", cmd.holder.Remote, "released", res.Released, "refused", res.Refused)
		return outcome{answer: protocol.AnswerOK}
	case protocol.ResetBySource:
		res, err := s.Table.ResetBySource(cmd.key)
		if err != nil {
			return s.refused(cmd, err)
		}
		if res.Released == 0 && res.Refused == 0 && !s.confirm(cmd) {
			return outcome{drop: true}
		}
		s.Logger.Info("reset by source", "source", cmd.key, "peer", cmd.holder.Remote, "released", res.Released, "refused", res.Refused)
		return outcome{answer: protocol.AnswerOK}
	}
	return outcome{answer: protocol.AnswerFail} // unreachable: callers check the action
}

// refused logs why cmd is answered '-': an error line when the journal
// refused (the disk needs a look); otherwise (not held, a session that
// ended) an info line for v1, one request per connection, and a debug
// line for a session, whose client may send such requests without pause.
//
// A journal error wrapping locker.ErrOutcomeUnknown is never answered:
// the change may still take effect, so the outcome says drop.
func (s *Server) refused(cmd command, err error) outcome {
	if errors.Is(err, locker.ErrOutcomeUnknown) {
		s.Logger.Warn("outcome not known: connection closed without an answer", "peer", cmd.holder.Remote,
			"action", cmd.action.String(), "key", cmd.key, "reason", err.Error())
		s.ambiguous(cmd.action)
		return outcome{drop: true}
	}
	lvl := slog.LevelInfo
	switch {
	case errors.Is(err, locker.ErrJournal):
		lvl = slog.LevelError
	case cmd.link != nil:
		lvl = slog.LevelDebug
	}
	msg := "request answered '-'"
	if cmd.link != nil {
		msg = "session request answered '-'"
	}
	s.Logger.Log(context.Background(), lvl, msg, "peer", cmd.holder.Remote,
		"action", cmd.action.String(), "key", cmd.key, "reason", err.Error())
	return outcome{answer: protocol.AnswerFail}
}
