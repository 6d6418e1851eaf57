package bus

import (
	"strconv"

	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/limiter/httplimit"
)

// DecisionMessage is the decision message of d, made by instance: the
// check's answer (httplimit.DecisionBody) with its type and the instance,
// so viewers read a decision as a client of the check API does. Like the
// check's answer, allowed says whether the request passed: a shadow policy's
// would-deny is allowed, marked wouldDeny, with the would-be retry. A
// locked-out key's denial adds when the lock ends (lockUntilMs), which the
// page counts down.
func DecisionMessage(d limiter.Decision, instance string) []byte {
	dst := make([]byte, 0, 384)
	dst = append(dst, `{"type":"`+TypeDecision+`",`...)
	dst = httplimit.NewDecisionBody(d).AppendMembers(dst)
	if d.Locked {
		dst = append(dst, `,"lockUntilMs":`...)
		dst = strconv.AppendInt(dst, d.LockUntilMs, 10)
	}
	dst = append(dst, `,"instance":`...)
	dst = append(dst, encode(instance)...)
	return append(dst, '}')
}
