#!/bin/bash
echo river > /app/data.txt
