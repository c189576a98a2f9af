"""wbcore-mcp: an MCP server (official mcp SDK) serving every toolkit's tools and skills."""
