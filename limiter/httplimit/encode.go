package httplimit

import (
	"encoding/json"
	"strconv"
)

// Every check answers with a DecisionBody or a DeniedBody, so they are
// encoded by hand: encoding/json's reflection was the largest part of the
// check handler's own CPU in the flood profile. The bytes are exactly
// json.Marshal's (TestAppendJSONMatchesMarshal).

// AppendJSON appends b as JSON, as json.Marshal encodes it.
func (b DecisionBody) AppendJSON(dst []byte) []byte {
	dst = append(dst, '{')
	dst = b.AppendMembers(dst)
	return append(dst, '}')
}

// AppendMembers appends b's members without the braces, so a message that
// carries a decision (the live stream's) adds its own around them.
func (b DecisionBody) AppendMembers(dst []byte) []byte {
	dst = append(dst, `"allowed":`...)
	dst = strconv.AppendBool(dst, b.Allowed)
	dst = append(dst, `,"key":`...)
	dst = appendString(dst, b.Key)
	dst = append(dst, `,"policy":`...)
	dst = appendString(dst, b.Policy)
	dst = appendInt(dst, `,"count":`, int64(b.Count))
	dst = appendInt(dst, `,"limit":`, int64(b.Limit))
	dst = appendInt(dst, `,"remaining":`, int64(b.Remaining))
	dst = appendInt(dst, `,"windowMs":`, b.WindowMs)
	if b.Period != "" {
		dst = append(dst, `,"period":`...)
		dst = appendString(dst, string(b.Period))
	}
	dst = appendInt(dst, `,"nowMs":`, b.NowMs)
	dst = append(dst, `,"oldestMs":`...)
	if b.OldestMs == nil {
		dst = append(dst, "null"...)
	} else {
		dst = strconv.AppendInt(dst, *b.OldestMs, 10)
	}
	dst = appendInt(dst, `,"retryAfterMs":`, b.RetryAfterMs)
	dst = append(dst, `,"id":`...)
	if b.ID == nil {
		dst = append(dst, "null"...)
	} else {
		dst = appendString(dst, *b.ID)
	}
	dst = append(dst, `,"rules":`...)
	if b.Rules == nil {
		dst = append(dst, "null"...)
	} else {
		dst = append(dst, '[')
		for i, r := range b.Rules {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendInt(dst, `{"limit":`, int64(r.Limit))
			if r.WindowMs != 0 {
				dst = appendInt(dst, `,"windowMs":`, r.WindowMs)
			}
			if r.Period != "" {
				dst = append(dst, `,"period":`...)
				dst = appendString(dst, string(r.Period))
			}
			dst = appendInt(dst, `,"count":`, int64(r.Count))
			dst = appendInt(dst, `,"remaining":`, int64(r.Remaining))
			dst = append(dst, '}')
		}
		dst = append(dst, ']')
	}
	if b.Cached {
		dst = append(dst, `,"cached":true`...)
	}
	if b.Shadow {
		dst = append(dst, `,"shadow":true`...)
	}
	if b.WouldDeny {
		dst = append(dst, `,"wouldDeny":true`...)
	}
	if b.Locked {
		dst = append(dst, `,"locked":true`...)
	}
	if b.LockLevel != 0 {
		dst = appendInt(dst, `,"lockLevel":`, int64(b.LockLevel))
	}
	if b.Override != "" {
		dst = append(dst, `,"override":`...)
		dst = appendString(dst, b.Override)
	}
	if b.BookedMs != 0 {
		dst = appendInt(dst, `,"bookedMs":`, b.BookedMs)
	}
	if b.WaitedMs != 0 {
		dst = appendInt(dst, `,"waitedMs":`, b.WaitedMs)
	}
	if b.Explain != nil { // asked for: off the hot path
		if e, err := json.Marshal(b.Explain); err == nil {
			dst = append(dst, `,"explain":`...)
			dst = append(dst, e...)
		}
	}
	return dst
}

// AppendJSON appends d as JSON, as json.Marshal encodes it.
func (d DeniedBody) AppendJSON(dst []byte) []byte {
	dst = append(dst, `{"type":`...)
	dst = appendString(dst, d.Type)
	dst = append(dst, `,"title":`...)
	dst = appendString(dst, d.Title)
	dst = appendInt(dst, `,"status":`, int64(d.Status))
	dst = append(dst, `,"detail":`...)
	dst = appendString(dst, d.Detail)
	dst = append(dst, `,"violated-policies":`...)
	if d.ViolatedPolicies == nil {
		dst = append(dst, "null"...)
	} else {
		dst = append(dst, '[')
		for i, v := range d.ViolatedPolicies {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendString(dst, v)
		}
		dst = append(dst, ']')
	}
	dst = append(dst, ',')
	dst = d.DecisionBody.AppendMembers(dst)
	return append(dst, '}')
}

func appendInt(dst []byte, member string, v int64) []byte {
	return strconv.AppendInt(append(dst, member...), v, 10)
}

// appendString appends s as a JSON string. Keys, policy names and ids are
// plain ASCII, written as they are; anything else goes through encoding/json
// for its escaping rules.
func appendString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20, c >= 0x80, c == '"', c == '\\', c == '<', c == '>', c == '&':
			b, _ := json.Marshal(s) // a string always encodes
			return append(dst, b...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}
