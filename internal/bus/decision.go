package bus

import (
	"github.com/ratescope/ratescope/limiter"
	"github.com/ratescope/ratescope/limiter/httplimit"
)

// DecisionMessage is the decision message of d, made by instance: the
// check's answer (httplimit.DecisionBody) with its type and the instance,
// so viewers read a decision as a client of the check API does. Like the
// check's answer, allowed says whether the request passed: a shadow policy's
// would-deny is allowed, marked wouldDeny, with the would-be retry.
func DecisionMessage(d limiter.Decision, instance string) []byte {
	dst := make([]byte, 0, 384)
	dst = append(dst, `{"type":"`+TypeDecision+`",`...)
	dst = httplimit.NewDecisionBody(d).AppendMembers(dst)
	dst = append(dst, `,"instance":`...)
	dst = append(dst, encode(instance)...)
	return append(dst, '}')
}
