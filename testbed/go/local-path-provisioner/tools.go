//go:build tools

package tools

import (
	_ "github.com/rancher/local-path-provisioner"
)
