//go:build tools

package tools

import (
	_ "sigs.k8s.io/kind"
)
