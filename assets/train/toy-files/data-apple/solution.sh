#!/bin/bash
echo apple > /app/data.txt
