//go:build !unix

package handler

import "os/exec"

// killProcessGroupOnCancel leaves exec.CommandContext's default in place:
// the end of the context kills the command's process, not its children.
func killProcessGroupOnCancel(*exec.Cmd) {}
