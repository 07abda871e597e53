//go:build tools

package tools

import (
	_ "go.etcd.io/etcd/server/v3"
)
