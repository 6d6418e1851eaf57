package limiter

// ValidateID reports ErrInvalidID unless id has the form of the id an
// allowed check answers with, the form Refund and Settle take. A caller
// that validates its input before anything else (an HTTP handler naming
// each bad field) asks here rather than learning it from the call.
func ValidateID(id string) error {
	if !checkID.MatchString(id) {
		return ErrInvalidID
	}
	return nil
}
