package mcp

// FastCalls is how many calls the fast path answered.
func FastCalls() int64 { return fastCalls.Load() }
