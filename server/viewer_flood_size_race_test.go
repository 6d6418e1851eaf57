//go:build race

package server_test

// floodViewers under -race, whose runtime allows 8,128 goroutines per
// process: the server runs two per viewer.
const floodViewers = 1500
