// Command printversion prints buildinfo.String, for the test that links it with LinkerFlags.
package main

import (
	"fmt"

	"github.com/gpudra/gpudra/internal/buildinfo"
)

func main() {
	fmt.Println(buildinfo.String("printversion"))
	fmt.Println(buildinfo.Get().GitTreeState)
}
