"""The dice cap for wbcore: ``wb.dice`` rolls dice from the host's random source."""
