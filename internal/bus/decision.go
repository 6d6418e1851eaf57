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
// page counts down. Every decision carries its explanation's numbers
// (httplimit.Lean, member explain), so a viewer can say why any of them
// came out as it did.
func DecisionMessage(d limiter.Decision, instance string) []byte {
	dst := make([]byte, 0, 384)
	dst = append(dst, `{"type":"`+TypeDecision+`",`...)
	b := httplimit.NewDecisionBody(d)
	b.Explain = httplimit.Lean(d) // the page explains any decision from it
	dst = b.AppendMembers(dst)
	if d.Locked {
		dst = append(dst, `,"lockUntilMs":`...)
		dst = strconv.AppendInt(dst, d.LockUntilMs, 10)
	}
	dst = append(dst, `,"instance":`...)
	dst = append(dst, encode(instance)...)
	return append(dst, '}')
}
