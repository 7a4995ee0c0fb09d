package main

import (
	"net/http"
	"testing"

	"github.com/gpudra/gpudra/webview"
	"github.com/gpudra/gpudra/webview/webviewtest"
)

func TestDashboardAnswersOnlyThisMachinesNames(t *testing.T) {
	webviewtest.CheckHosts(t, localDashboard, webview.SecurityHeaders, []webviewtest.Host{
		{Name: "opened at 127.0.0.1", Host: "127.0.0.1:PORT", Want: http.StatusOK},
		{Name: "opened at localhost", Host: "localhost:PORT", Want: http.StatusOK},
		{Name: "a page at a name rebound to 127.0.0.1", Host: "evil.example:PORT", Want: http.StatusMisdirectedRequest},
	})
}
