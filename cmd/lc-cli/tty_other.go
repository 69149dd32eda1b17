//go:build !linux

package main

import (
	"os"
	"os/exec"
)

// isTerminal is false off Linux: the status line is not drawn there.
func isTerminal(*os.File) bool { return false }

func termWidth(*os.File) int { return 80 }

// setParentDeathSignal has no portable equivalent off Linux.
func setParentDeathSignal(*exec.Cmd) {}
