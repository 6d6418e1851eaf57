package server

import (
	_ "embed"
	"net/http"

	"github.com/labstack/echo/v4"
)

// openAPI is the OpenAPI 3.1 document of the HTTP API: the one description
// of every route, its parameters and its answers, which the tests validate
// real responses against.
//
//go:embed openapi.json
var openAPI []byte

// handleOpenAPI serves the document.
func handleOpenAPI() echo.HandlerFunc {
	return func(c echo.Context) error {
		return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, openAPI)
	}
}
