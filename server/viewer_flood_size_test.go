//go:build !race

package server_test

// floodViewers is how many viewers TestViewerFlood connects: the issue's
// flood (5,000–6,000 sockets), each on a window of its own.
const floodViewers = 5000
