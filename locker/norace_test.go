//go:build !race

package locker

const raceEnabled = false
