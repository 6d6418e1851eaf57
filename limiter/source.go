package limiter

// CheckScriptSource is the Lua source of the check script, for tools that
// measure the limiter against raw EVALSHA calls of the same script.
func CheckScriptSource() string { return checkSrc }
